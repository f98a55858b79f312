//===- Checksum.h - The checksum at the end of an artifact ------*- C++ -*-===//
//
// Part of ShardX.
//
// `shardx-compile` ends every artifact it writes with 16 bytes after the
// shared object: the CRC-32 (zlib's) of every byte before them, 4 bytes
// reserved (0), and the magic "SHXCRC01". The dynamic loader ignores bytes
// after the ELF data. Before `dlopen` maps an artifact, the executor checks
// the sum: a corrupt byte anywhere in the file is a clear error instead of
// a crash in the loader or in the code. A file without the magic (made by a
// ShardX before the checksum, or by another tool) is loaded as before, after
// the ELF checks. Needs no MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_EXEC_CHECKSUM_H
#define SHARDX_EXEC_CHECKSUM_H

#include <string>

namespace shardx::exec {

/// Appends the checksum footer to the file at `path`. False with `error`
/// set where it cannot be read or written.
bool appendChecksum(const std::string &path, std::string &error);

enum class ChecksumStatus {
  Matches, ///< The footer is there and the sum matches.
  Missing, ///< No footer: a file from before the checksum or another tool.
  Differs, ///< The footer is there and the sum differs: a corrupt file.
  Unreadable,
};

/// Checks the footer of the file at `path`; `error` says why where the
/// status is Differs or Unreadable.
ChecksumStatus verifyChecksum(const std::string &path, std::string &error);

} // namespace shardx::exec

#endif // SHARDX_EXEC_CHECKSUM_H
