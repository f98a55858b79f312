//===- UseIndex.cpp - The uses of a function's values, by layout ----------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "UseIndex.h"

#include "shardx/Rules/ShardingRule.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

using namespace mlir;
using namespace mlir::shardx;

void UseIndex::build(Block &body,
                     const DenseMap<Operation *, unsigned> &position,
                     function_ref<LayoutAttr(OpOperand &)> requirement) {
  this->body = &body;
  valueUses.clear();
  valueIndex.clear();
  // Sized once: an entry moved by a reallocation would be copied (its
  // move constructor is not noexcept), vectors of use ranks included.
  size_t numValues = body.getNumArguments();
  for (Operation &op : body)
    numValues += op.getNumResults();
  valueUses.reserve(numValues);
  valueIndex.reserve(numValues);
  // The top-level uses, most of them: the map of ranks is not rehashed
  // (copied) again and again while it fills.
  size_t numUses = 0;
  for (Operation &op : body)
    numUses += op.getNumOperands();
  useRank.reserve(numUses);
  auto index = [&](Value v) {
    if (!isa<RankedTensorType>(v.getType()))
      return;
    valueIndex[v] = valueUses.size();
    valueUses.emplace_back();
    ValueUses &entry = valueUses.back();
    entry.shapeOnly = isRematerializable(v);
    for (OpOperand &use : v.getUses()) {
      unsigned rank = entry.uses.size();
      entry.uses.push_back(&use);
      useRank[&use] = rank;
      Operation *owner = use.getOwner();
      if (owner->getBlock() == &body) {
        if (isa<func::ReturnOp>(owner)) {
          entry.returns.push_back(rank);
          continue;
        }
        if (auto it = position.find(owner); it != position.end())
          entry.movableUsers.push_back(it->second);
      }
      if (LayoutAttr need = requirement(use))
        addNeed(use, need);
    }
    llvm::sort(entry.movableUsers);
    entry.movableUsers.erase(llvm::unique(entry.movableUsers),
                             entry.movableUsers.end());
  };
  for (BlockArgument arg : body.getArguments())
    index(arg);
  for (Operation &op : body)
    for (Value r : op.getResults())
      index(r);
}

void UseIndex::addNeed(OpOperand &use, LayoutAttr layout) {
  ValueUses &entry = of(use.get());
  bool nested = isNested(use);
  unsigned rank = rankOf(use);
  for (Need &need : entry.needs)
    if (need.layout == layout && need.nested == nested) {
      auto at = llvm::lower_bound(need.ranks, rank);
      if (at == need.ranks.end() || *at != rank)
        need.ranks.insert(at, rank);
      return;
    }
  entry.needs.push_back(Need{layout, nested, {rank}});
}

void UseIndex::removeNeed(OpOperand &use, LayoutAttr layout) {
  ValueUses &entry = of(use.get());
  bool nested = isNested(use);
  unsigned rank = rankOf(use);
  for (auto it = entry.needs.begin(); it != entry.needs.end(); ++it)
    if (it->layout == layout && it->nested == nested) {
      auto at = llvm::lower_bound(it->ranks, rank);
      if (at != it->ranks.end() && *at == rank)
        it->ranks.erase(at);
      if (it->ranks.empty())
        entry.needs.erase(it);
      return;
    }
  assert(false && "removing a need that was not recorded");
}
