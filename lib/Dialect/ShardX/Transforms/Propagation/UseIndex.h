//===- UseIndex.h - The uses of a function's values, by layout --*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The uses of every top-level tensor value of a function, indexed so that
// the value's reshard cost and the layouts its consumers need are found
// without a scan of all its uses: the distinct layouts the uses need, each
// with the positions (ranks, in use-list order) of the uses that need it.
// FunctionCost sums each distinct layout once, in the order of the first
// use that needs it, as a scan of the uses would; a change of one op's
// layouts moves its operands' needs (addNeed / removeNeed).
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_USEINDEX_H
#define SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_USEINDEX_H

#include "shardx/Dialect/ShardX/IR/ShardX.h"

#include "mlir/IR/Block.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"

#include <vector>

namespace mlir::shardx {

class UseIndex {
public:
  /// The uses that need one layout.
  struct Need {
    LayoutAttr layout;
    bool nested; // read inside a region of a top-level op
    /// Sorted, distinct (a vector: a set's node per use was a malloc per
    /// change of a search).
    SmallVector<unsigned, 2> ranks;
  };
  /// The uses of one value.
  struct ValueUses {
    SmallVector<OpOperand *> uses; // in use-list order
    SmallVector<Need, 2> needs;
    SmallVector<unsigned, 1> returns;   // ranks of the uses by the return
    SmallVector<unsigned> movableUsers; // positions of movable users, sorted
    bool shapeOnly = false;             // rematerialized: its reshards are free
    /// FunctionCost's price of these needs from the value's layout as they
    /// stand (`costKnown`); FunctionCost forgets it when either changes.
    bool costKnown = false;
    double cost = 0;
  };

  /// Indexes the uses of `body`'s arguments and op results. `position`
  /// numbers the ops a search may move; `requirement` gives the layout a
  /// use (other than by the return) needs, null for none.
  void build(Block &body, const DenseMap<Operation *, unsigned> &position,
             function_ref<LayoutAttr(OpOperand &)> requirement);

  ValueUses &of(Value v) { return valueUses[valueIndex.find(v)->second]; }
  /// The position of `use` in its value's use list.
  unsigned rankOf(OpOperand &use) const { return useRank.find(&use)->second; }

  void addNeed(OpOperand &use, LayoutAttr layout);
  void removeNeed(OpOperand &use, LayoutAttr layout);

private:
  bool isNested(OpOperand &use) const {
    return use.getOwner()->getBlock() != body;
  }

  Block *body = nullptr;
  std::vector<ValueUses> valueUses;
  DenseMap<Value, unsigned> valueIndex;
  DenseMap<OpOperand *, unsigned> useRank;
};

} // namespace mlir::shardx

#endif // SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_USEINDEX_H
