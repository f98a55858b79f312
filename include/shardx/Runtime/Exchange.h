//===- Exchange.h - One reshard step driven by its layouts ------*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The general form of every data-moving reshard step (all_gather,
// reduce_scatter, all_to_all, chunk, permute): within the group over `axes`,
// every rank gets its shard of the target layout, taken from the members
// that hold it under the source layout and reduced over the group axes on
// which the source is Partial and the target is not. The shards come from
// the layout algebra, so uneven, nested and strided shards of any size are
// exact. Compiled programs use it for the steps whose local shapes differ
// between ranks (`shardx.exchange`); the communication is one variable-count
// all-to-all that moves each element once per term. No MLIR dependency.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_RUNTIME_EXCHANGE_H
#define SHARDX_RUNTIME_EXCHANGE_H

#include "shardx/Layout/Layout.h"
#include "shardx/Runtime/Communicator.h"

#include <cstdint>
#include <vector>

namespace shardx::rt {

/// Runs one reshard step from `source` to `target` of a global tensor of
/// `globalShape` within this rank's group over `axes`. `in` holds this
/// rank's source shard and `out` receives its target shard (both dense,
/// row-major, in local order). Fails (on every rank of the group, with the
/// cause) when the step needs ranks outside the group or would create a
/// Partial.
Status exchange(Communicator &comm, const void *in, void *out, DType type,
                const std::vector<int64_t> &globalShape, const Layout &source,
                const Layout &target, const std::vector<int64_t> &axes);

/// A step as a flat integer list for compiled code: the tensor rank, the
/// global shape, the source layout's and the target layout's encode().
inline std::vector<int64_t>
encodeExchange(const std::vector<int64_t> &globalShape, const Layout &source,
               const Layout &target) {
  std::vector<int64_t> out = {static_cast<int64_t>(globalShape.size())};
  out.insert(out.end(), globalShape.begin(), globalShape.end());
  for (const Layout *l : {&source, &target}) {
    std::vector<int64_t> e = l->encode();
    out.insert(out.end(), e.begin(), e.end());
  }
  return out;
}
/// Inverse of encodeExchange.
bool decodeExchange(const int64_t *data, size_t size,
                    std::vector<int64_t> &globalShape, Layout &source,
                    Layout &target, std::string &error);

} // namespace shardx::rt

#endif // SHARDX_RUNTIME_EXCHANGE_H
