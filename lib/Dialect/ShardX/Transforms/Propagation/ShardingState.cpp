//===- ShardingState.cpp - The strategies propagation chose ---------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "ShardingState.h"
#include "LayoutUtils.h"

using namespace mlir;
using namespace mlir::shardx;
using ::shardx::Layout;

ShardingState::ShardingState(FlatSymbolRefAttr mesh, int64_t meshRank)
    : mesh(mesh), replicated(LayoutAttr::get(mesh, Layout(meshRank))) {}

void ShardingState::attach(Strategy &s) const {
  s.operandAttrs.clear();
  s.resultAttrs.clear();
  for (const Layout &l : s.operandLayouts)
    s.operandAttrs.push_back(attr(l));
  for (const Layout &l : s.resultLayouts)
    s.resultAttrs.push_back(attr(l));
}

void ShardingState::set(Operation *op, Strategy s) {
  if (!s.hasAttrs())
    attach(s);
  strategies[op] = std::move(s);
}

Strategy *ShardingState::find(Operation *op) {
  auto it = strategies.find(op);
  return it == strategies.end() ? nullptr : &it->second;
}

Strategy &ShardingState::get(Operation *op) {
  auto it = strategies.find(op);
  assert(it != strategies.end() && "op without a strategy");
  return it->second;
}

unsigned mlir::shardx::tensorResultIndex(OpResult result) {
  unsigned n = 0;
  for (OpResult other : result.getOwner()->getResults()) {
    if (other == result)
      break;
    if (isa<RankedTensorType>(other.getType()))
      ++n;
  }
  return n;
}

LayoutAttr ShardingState::layoutOf(Value v) const {
  if (auto r = dyn_cast<OpResult>(v))
    if (auto it = strategies.find(r.getOwner()); it != strategies.end())
      return it->second.resultAttrs[tensorResultIndex(r)];
  LayoutAttr a = getRecordedLayout(v);
  return a ? a : replicated;
}

void ShardingState::writeToIR() const {
  for (auto &[op, s] : strategies) {
    MLIRContext *ctx = op->getContext();
    if (!s.operandAttrs.empty())
      op->setAttr(ShardXDialect::getOperandLayoutsAttrName(),
                  ArrayAttr::get(ctx, SmallVector<Attribute>(
                                          s.operandAttrs.begin(),
                                          s.operandAttrs.end())));
    if (!s.resultAttrs.empty())
      op->setAttr(ShardXDialect::getLayoutsAttrName(),
                  ArrayAttr::get(ctx, SmallVector<Attribute>(
                                          s.resultAttrs.begin(),
                                          s.resultAttrs.end())));
  }
  for (auto &[op, table] : tableLayouts)
    op->setAttr(kTableLayoutAttrName, table);
}
