//===- Digits.h - The mixed-radix view of one sharded dim -------*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// A dim's splits seen as the digits [F_0, A_1, F_1, ..., A_k, rest] of the
// file comment of Layout.h, and the one operation on them: carving mesh axes
// out of the local piece. Canonicalizing StridedShard spellings, spelling
// layouts as DTensor placements and carveSplits (SplitAlgebra.h) share it.
// Private to lib/Layout.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_LAYOUT_DIGITS_H
#define SHARDX_LIB_LAYOUT_DIGITS_H

#include "shardx/Layout/Layout.h"

#include <string>
#include <vector>

namespace shardx::detail {

/// A digit of the mixed-radix view of a dim: a mesh axis, a run of unsplit
/// blocks, or the trailing remainder whose size depends on the tensor.
struct Digit {
  enum class Kind { Axis, Free, Rest } kind;
  int64_t value; // axis id (Axis) or size (Free)
};

/// Applies one DTensor split (the mesh axes `axes`, of total size `n`, acting
/// as one axis, split factor `sf`) to the digits of a dim: the local piece
/// (the free digits) is viewed as (sf, n, rest) and the n part becomes the
/// axis digits, in order. Fails with `error` when `sf` does not fall on a
/// block boundary or the block there does not divide by `n`.
bool applySplit(std::vector<Digit> &digits, const std::vector<int64_t> &axes,
                int64_t n, int64_t sf, std::string &error);
/// The splits the axis digits of `digits` make, major first.
std::vector<Split> digitsToSplits(const std::vector<Digit> &digits);
/// The digits of a dim with `splits`, ending in the rest digit.
std::vector<Digit> splitsToDigits(const std::vector<Split> &splits);

} // namespace shardx::detail

#endif // SHARDX_LIB_LAYOUT_DIGITS_H
