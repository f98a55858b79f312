//===- ShardingState.cpp - The layouts propagation chose per op -----------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "ShardingState.h"
#include "LayoutUtils.h"
#include "shardx/Dialect/ShardX/IR/LibraryNames.h"

using namespace mlir;
using namespace mlir::shardx;

ShardingState::ShardingState(FlatSymbolRefAttr mesh, int64_t meshRank)
    : mesh(mesh), replicated(LayoutAttr::get(mesh, Layout(meshRank))) {}

void ShardingState::attach(OpLayouts &s) const {
  s.operandAttrs.clear();
  s.resultAttrs.clear();
  for (const Layout &l : s.operandLayouts)
    s.operandAttrs.push_back(attr(l));
  for (const Layout &l : s.resultLayouts)
    s.resultAttrs.push_back(attr(l));
}

void ShardingState::set(Operation *op, OpLayouts s) {
  if (!s.hasAttrs())
    attach(s);
  opLayouts[op] = std::move(s);
}

OpLayouts *ShardingState::find(Operation *op) {
  auto it = opLayouts.find(op);
  return it == opLayouts.end() ? nullptr : &it->second;
}

OpLayouts &ShardingState::get(Operation *op) {
  auto it = opLayouts.find(op);
  assert(it != opLayouts.end() && "op without a strategy");
  return it->second;
}

std::string mlir::shardx::describe(const OpLayouts &s) {
  std::string text;
  llvm::raw_string_ostream os(text);
  auto print = [&](ArrayRef<Layout> layouts, ArrayRef<LayoutAttr> attrs) {
    if (!layouts.empty())
      llvm::interleaveComma(layouts, os,
                            [&](const Layout &l) { os << l.str(); });
    else
      llvm::interleaveComma(attrs, os,
                            [&](LayoutAttr a) { os << a.getLayout().str(); });
  };
  os << "(";
  print(s.operandLayouts, s.operandAttrs);
  os << ") -> (";
  print(s.resultLayouts, s.resultAttrs);
  os << ")";
  return text;
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
    if (auto it = opLayouts.find(r.getOwner()); it != opLayouts.end())
      return it->second.resultAttrs[tensorResultIndex(r)];
  LayoutAttr a = getRecordedLayout(v);
  return a ? a : replicated;
}

void ShardingState::writeToIR() const {
  for (auto &[op, s] : opLayouts) {
    MLIRContext *ctx = op->getContext();
    if (!s.operandAttrs.empty())
      op->setAttr(
          ShardXDialect::getOperandLayoutsAttrName(),
          ArrayAttr::get(ctx, SmallVector<Attribute>(s.operandAttrs.begin(),
                                                     s.operandAttrs.end())));
    if (!s.resultAttrs.empty())
      op->setAttr(
          ShardXDialect::getLayoutsAttrName(),
          ArrayAttr::get(ctx, SmallVector<Attribute>(s.resultAttrs.begin(),
                                                     s.resultAttrs.end())));
  }
  for (auto &[op, layout] : capturedLayouts)
    op->setAttr(kTableLayoutAttrName, layout);
}
