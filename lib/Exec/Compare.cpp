//===- Compare.cpp - Element-wise comparison of two runs ------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "Elements.h"
#include "shardx/Exec/Executor.h"

#include <algorithm>
#include <cmath>
#include <limits>

using namespace shardx;
using namespace shardx::exec;
using namespace shardx::exec::detail;

Difference shardx::exec::compare(const HostTensor &a, const HostTensor &b,
                                 double rtol, double atol,
                                 bool allowNonFinite) {
  Difference d;
  d.elements = a.numElements();
  if (a.shape != b.shape) {
    d.withinTolerance = false;
    d.mismatches = d.elements;
    d.maxAbs = d.maxRel = std::numeric_limits<double>::infinity();
    return d;
  }
  constexpr double inf = std::numeric_limits<double>::infinity();
  size_t ea = a.elementSize(), eb = b.elementSize();
  for (int64_t i = 0; i < a.numElements(); ++i) {
    double x = loadAsDouble(a.data.data() + i * ea, a.dtype);
    double y = loadAsDouble(b.data.data() + i * eb, b.dtype);
    if (!std::isfinite(x) || !std::isfinite(y)) {
      // NaN == NaN and Inf == Inf (same sign) agree but show nothing.
      bool same = (std::isnan(x) && std::isnan(y)) || x == y;
      if (same) {
        ++d.bothNonFinite;
      } else {
        ++d.mismatches;
        d.maxAbs = d.maxRel = inf;
      }
      continue;
    }
    double abs = std::fabs(x - y);
    d.maxAbs = std::max(d.maxAbs, abs);
    d.maxRel = std::max(d.maxRel, abs / std::max(std::fabs(y), atol));
    if (abs > atol + rtol * std::fabs(y))
      ++d.mismatches;
  }
  d.withinTolerance =
      d.mismatches == 0 && (allowNonFinite || d.bothNonFinite == 0);
  return d;
}

