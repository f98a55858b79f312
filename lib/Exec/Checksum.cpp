//===- Checksum.cpp - The checksum at the end of an artifact --------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Exec/Checksum.h"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <vector>

#include <zlib.h>

using namespace shardx::exec;

namespace {

constexpr char kMagic[8] = {'S', 'H', 'X', 'C', 'R', 'C', '0', '1'};
constexpr std::streamoff kFooterSize = 16;

/// The CRC-32 of the first `size` bytes of `in`.
bool crcOf(std::ifstream &in, std::streamoff size, uint32_t &crc) {
  std::vector<char> buffer(1 << 20);
  uLong sum = crc32_z(0L, Z_NULL, 0);
  in.seekg(0);
  for (std::streamoff left = size; left > 0;) {
    std::streamsize chunk =
        static_cast<std::streamsize>(std::min<std::streamoff>(
            left, static_cast<std::streamoff>(buffer.size())));
    if (!in.read(buffer.data(), chunk))
      return false;
    sum = crc32_z(sum, reinterpret_cast<const Bytef *>(buffer.data()),
                  static_cast<z_size_t>(chunk));
    left -= chunk;
  }
  crc = static_cast<uint32_t>(sum);
  return true;
}

void putLittleEndian(char *out, uint32_t value) {
  for (int i = 0; i < 4; ++i)
    out[i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

uint32_t getLittleEndian(const char *in) {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i)
    value |= static_cast<uint32_t>(static_cast<unsigned char>(in[i]))
             << (8 * i);
  return value;
}

} // namespace

bool shardx::exec::appendChecksum(const std::string &path, std::string &error) {
  uint32_t crc = 0;
  {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in || !crcOf(in, in.tellg(), crc)) {
      error = "cannot read " + path + ": " + std::strerror(errno);
      return false;
    }
  }
  char footer[kFooterSize] = {};
  putLittleEndian(footer, crc);
  std::memcpy(footer + 8, kMagic, sizeof(kMagic));
  std::ofstream out(path, std::ios::binary | std::ios::app);
  if (!out || !out.write(footer, kFooterSize) || !out.flush()) {
    error = "cannot write " + path + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

ChecksumStatus shardx::exec::verifyChecksum(const std::string &path,
                                            std::string &error) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) {
    error = "cannot read " + path + ": " + std::strerror(errno);
    return ChecksumStatus::Unreadable;
  }
  std::streamoff size = in.tellg();
  if (size < kFooterSize)
    return ChecksumStatus::Missing;
  char footer[kFooterSize];
  in.seekg(size - kFooterSize);
  if (!in.read(footer, kFooterSize)) {
    error = "cannot read " + path + ": " + std::strerror(errno);
    return ChecksumStatus::Unreadable;
  }
  if (std::memcmp(footer + 8, kMagic, sizeof(kMagic)) != 0)
    return ChecksumStatus::Missing;
  uint32_t crc = 0;
  if (!crcOf(in, size - kFooterSize, crc)) {
    error = "cannot read " + path + ": " + std::strerror(errno);
    return ChecksumStatus::Unreadable;
  }
  if (crc != getLittleEndian(footer)) {
    error = "cannot load " + path +
            ": its checksum does not match its contents (a corrupt file? "
            "compile it again)";
    return ChecksumStatus::Differs;
  }
  return ChecksumStatus::Matches;
}
