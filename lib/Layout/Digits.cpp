//===- Digits.cpp - The mixed-radix view of one sharded dim ---------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "Digits.h"

#include <cassert>

namespace shardx::detail {

bool applySplit(std::vector<Digit> &digits, const std::vector<int64_t> &axes,
                int64_t n, int64_t sf, std::string &error) {
  int64_t axis = axes.front();
  size_t idx = 0;
  int64_t prefix = 1;
  auto fail = [&] {
    error = "split factor " + std::to_string(sf) + " on mesh axis " +
            std::to_string(axis) +
            " does not fall on a block boundary of the splits before it";
    return false;
  };
  // Walk past free digits until their product is exactly sf.
  while (prefix < sf) {
    while (idx < digits.size() && digits[idx].kind == Digit::Kind::Axis)
      ++idx;
    assert(idx < digits.size() && "the rest digit is always last");
    Digit &d = digits[idx];
    if (sf % prefix != 0)
      return fail();
    int64_t need = sf / prefix;
    if (d.kind == Digit::Kind::Rest) {
      digits.insert(digits.begin() + idx, Digit{Digit::Kind::Free, need});
      ++idx;
      prefix = sf;
      break;
    }
    if (d.value <= need) {
      if (need % d.value != 0)
        return fail();
      prefix *= d.value;
      ++idx;
      continue;
    }
    if (d.value % need != 0)
      return fail();
    int64_t remaining = d.value / need;
    d.value = need;
    digits.insert(digits.begin() + idx + 1,
                  Digit{Digit::Kind::Free, remaining});
    ++idx;
    prefix = sf;
  }
  if (prefix != sf)
    return fail();
  // The next free digit must start with n.
  while (idx < digits.size() && digits[idx].kind == Digit::Kind::Axis)
    ++idx;
  assert(idx < digits.size());
  Digit &d = digits[idx];
  std::vector<Digit> axisDigits;
  for (int64_t a : axes)
    axisDigits.push_back(Digit{Digit::Kind::Axis, a});
  if (d.kind == Digit::Kind::Rest) {
    digits.insert(digits.begin() + idx, axisDigits.begin(), axisDigits.end());
    return true;
  }
  if (d.value % n != 0) {
    error = "mesh axis " + std::to_string(axis) + " (size " +
            std::to_string(n) + ") cannot split a block of " +
            std::to_string(d.value) + " left by the split factors before it";
    return false;
  }
  int64_t remaining = d.value / n;
  digits.erase(digits.begin() + idx);
  if (remaining != 1)
    digits.insert(digits.begin() + idx, Digit{Digit::Kind::Free, remaining});
  digits.insert(digits.begin() + idx, axisDigits.begin(), axisDigits.end());
  return true;
}

std::vector<Split> digitsToSplits(const std::vector<Digit> &digits) {
  std::vector<Split> splits;
  int64_t free = 1;
  for (const Digit &d : digits) {
    if (d.kind == Digit::Kind::Free)
      free *= d.value;
    else if (d.kind == Digit::Kind::Axis)
      splits.push_back({d.value, free});
  }
  return splits;
}

std::vector<Digit> splitsToDigits(const std::vector<Split> &splits) {
  std::vector<Digit> digits;
  int64_t prev = 1;
  for (const Split &s : splits) {
    if (s.stride / prev != 1)
      digits.push_back({Digit::Kind::Free, s.stride / prev});
    digits.push_back({Digit::Kind::Axis, s.axis});
    prev = s.stride;
  }
  digits.push_back({Digit::Kind::Rest, 0});
  return digits;
}

} // namespace shardx::detail
