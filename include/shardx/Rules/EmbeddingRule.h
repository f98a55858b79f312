//===- EmbeddingRule.h - The sharding rule of embedding lookups -*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// An embedding lookup gathers rows of a 2-D table by an index tensor. The
// importer writes it as a linalg.generic over the index whose body reads
// the table (captured from above, not an operand) with tensor.extract, so
// the ShardingRuleOpInterface rule of the generic cannot name the table.
// This is the lookup's rule, read as Shardy and GSPMD read a gather:
//
//   index [b...], init [b..., d], table (captured) [v, d] -> [b..., d]
//
// with b... the index dims (parallel), d the table's columns (parallel:
// the result's last dim is split like the table's columns) and v the
// vocabulary (the table's rows): a table split by rows is looked up
// masked — each rank reads the rows it holds and yields zeros for the
// others — so the result is a pending sum over the row axes. A table
// pending a sum or an average (Partial) gives a result pending the same
// (the lookup is linear in its table), the index read whole on those axes;
// one pending a max, min or prod has no rule. The table leads: its layout
// decides the lookup's, the index keeps its own only on axes the table
// does not use.
//
// An aligned gather reads its captured source at indices that are, per
// source dim, either a loop of the op (`linalg.index j`, the source dim as
// long as loop j) or computed from the data (`torch.gather` along a dim,
// the cross-entropy's pick of each row's target log-probability):
//
//   operands [loops...], source (captured) [s...] -> [loops...]
//
// A source dim read at loop j may be split (unit strides) and loop j is
// then split alike on every operand and the result, so each rank reads the
// rows it holds at its local loop values; a dim read at data-dependent
// indices must be whole. Loops the source does not split keep the operands'
// splits on axes the source does not use. A source pending a reduction has
// no rule.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_RULES_EMBEDDINGRULE_H
#define SHARDX_RULES_EMBEDDINGRULE_H

#include "shardx/Layout/Layout.h"

#include "mlir/IR/Operation.h"

#include "llvm/ADT/STLFunctionalExtras.h"

#include <optional>

namespace mlir::shardx {

/// An embedding lookup as the importer writes it: a linalg.generic over the
/// index tensor whose body yields `tensor.extract %table[index_cast(%idx),
/// linalg.index(last)]` of a 2-D table captured from above.
struct EmbeddingLookup {
  Value table;
  Operation *extract;
};
std::optional<EmbeddingLookup> matchEmbeddingLookup(Operation *op);

/// The layouts of an embedding lookup under its rule.
struct EmbeddingShardings {
  ::shardx::Layout index, init, result;
};

/// The lookup's layouts when its table is in `table` and its index in
/// `index` (the result of rank `resultRank`, on a mesh of `meshRank` axes),
/// or none when the table is neither split by stride-1 rows and/or columns
/// nor pending a sum or an average, or pends a max, min or prod (then the
/// lookup runs replicated, as every op reading a captured tensor does).
/// Without `partialTables` a pending table has no rule either.
std::optional<EmbeddingShardings>
shardEmbeddingLookup(const ::shardx::Layout &table,
                     const ::shardx::Layout &index, int64_t resultRank,
                     int64_t meshRank, bool partialTables = true);

/// The uses, inside `op`'s regions, of ranked tensors defined outside `op`
/// (its captured tensors: operands in effect, which the op's operand
/// layouts do not cover).
SmallVector<OpOperand *> capturedTensorUses(Operation *op);

/// An aligned gather (the file comment): a linalg.generic without
/// reductions whose body yields `tensor.extract %source[...]` of a tensor
/// captured from above, `aligned[k]` the loop whose `linalg.index` reads
/// source dim k (of the loop's static extent), or -1 for an index computed
/// otherwise. Not an embedding lookup.
struct AlignedGather {
  Value source;
  Operation *extract;
  SmallVector<int64_t, 4> aligned;
};
std::optional<AlignedGather> matchAlignedGather(Operation *op);

/// The layouts of an op whose region reads a tensor captured from above
/// through a rule of its own (an embedding lookup's, an aligned gather's):
/// its tensor operands', its tensor results' and the captured tensor's,
/// given the layouts values have now (`layoutOf`). None when `op` has no
/// such rule or its rule does not apply (then it runs replicated).
struct CapturingOpShardings {
  SmallVector<::shardx::Layout, 2> operands, results;
  ::shardx::Layout captured;
};
std::optional<CapturingOpShardings>
shardCapturingOp(Operation *op,
                 function_ref<const ::shardx::Layout &(Value)> layoutOf,
                 int64_t meshRank, bool partialTables = true);

} // namespace mlir::shardx

#endif // SHARDX_RULES_EMBEDDINGRULE_H
