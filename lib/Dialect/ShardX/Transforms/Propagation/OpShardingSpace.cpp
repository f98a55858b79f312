//===- OpShardingSpace.cpp - The layouts one op can take ------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "OpShardingSpace.h"

#include "LayoutUtils.h"

#include "shardx/Dialect/ShardX/IR/LibraryNames.h"
#include "shardx/Rules/ShardingRule.h"

using namespace mlir;
using namespace mlir::shardx;

void mlir::shardx::appendAttrs(SmallVectorImpl<uintptr_t> &key,
                               ArrayRef<LayoutAttr> attrs) {
  for (LayoutAttr a : attrs)
    key.push_back(reinterpret_cast<uintptr_t>(a.getAsOpaquePointer()));
  key.push_back(~uintptr_t(0));
}

/// Partial only on axes the strategy leaves free (`used`) and the results do
/// not reduce over, all on the same axes, with `op` linear in them; none
/// otherwise.
SmallVector<std::optional<ReduceOp>>
OpShardingSpace::keptPartials(Operation *op, uint64_t used,
                              ArrayRef<std::optional<ReduceOp>> resultPartials,
                              llvm::SmallBitVector &partialOperands) {
  SmallVector<std::optional<ReduceOp>> kept(meshRank);
  // Operands with a Partial of sum/avg on axes the strategy leaves free.
  SmallVector<unsigned> candidates;
  for (OpOperand &operand : op->getOpOperands()) {
    if (!isa<RankedTensorType>(operand.get().getType()))
      continue;
    Layout l = layoutOf(operand.get());
    if (!l.hasPartial())
      continue;
    bool ok = true;
    for (auto [axis, p] : llvm::enumerate(l.getPartials())) {
      if (!p)
        continue;
      if ((*p != ReduceOp::Sum && *p != ReduceOp::Avg) || (used >> axis & 1) ||
          resultPartials[axis])
        ok = false;
    }
    if (ok)
      candidates.push_back(operand.getOperandNumber());
  }
  if (!candidates.empty()) {
    for (unsigned c : candidates)
      partialOperands.set(c);
    if (!isLinearIn(op, partialOperands)) {
      partialOperands.reset();
    } else {
      // All partial operands must be partial on the same axes.
      std::optional<SmallVector<std::optional<ReduceOp>>> common;
      for (unsigned c : candidates) {
        auto p = layoutOf(op->getOperand(c)).getPartials();
        SmallVector<std::optional<ReduceOp>> v(p.begin(), p.end());
        if (!common)
          common = v;
        else if (*common != v)
          partialOperands.reset();
      }
      if (partialOperands.any())
        kept = *common;
    }
  }
  return kept;
}

/// Whether `l` is a layout a value of `v`'s type can have on the mesh.
static bool fits(const Layout &l, Value v, ArrayRef<int64_t> meshShape) {
  auto type = cast<RankedTensorType>(v.getType());
  return l
      .verifyForShape(meshShape, std::vector<int64_t>(type.getShape().begin(),
                                                      type.getShape().end()))
      .empty();
}

/// The halo exchanges of tensor operand `index` (type `type`) in layout
/// `l`, priced as shardx-lower-halos lowers them: per split windowed dim
/// the op reads across shard edges, one neighbour permute per side that
/// exists (`low > 0`, `high > 0`) with that side's rows, or in a group of
/// two a single permute of the wider side's rows; a row is the largest
/// local extent of the other dims, widened by the rows the halos of earlier
/// dims added to the largest member (the halos chain, so corners move once;
/// in a group of two a member receives one side).
static void addHalos(const ShardingRule &rule, unsigned index, const Layout &l,
                     RankedTensorType type, ArrayRef<int64_t> meshShape,
                     OpLayouts &s) {
  // Per dim, the rows the halos exchanged so far added.
  SmallVector<int64_t> widened(type.getRank(), 0);
  for (const ShardingRule::WindowedDim &w : rule.windows) {
    if (w.result || w.tensor != index || !w.halo)
      continue;
    const DimSharding *ds = l.getDim(w.dim);
    if (!ds || ds->splits.empty())
      continue;
    int64_t axis = ds->splits[0].axis, n = meshShape[axis];
    if (n == 1) // lowered to a cast
      continue;
    if (!type.getElementType().isIntOrFloat()) // no width; never exchanged
      continue;
    int64_t row = std::max<int64_t>(1, type.getElementTypeBitWidth() / 8);
    for (int64_t d = 0; d < type.getRank(); ++d) {
      if (d == w.dim)
        continue;
      int64_t size = type.getDimSize(d);
      if (const DimSharding *other = l.getDim(d))
        size = llvm::divideCeil(size, splitCount(*other, meshShape));
      row *= size + widened[d];
    }
    int64_t low = w.haloLow(), high = w.haloHigh();
    if (n == 2 && low > 0 && high > 0) {
      s.halos.emplace_back(axis, std::max(low, high) * row);
    } else {
      for (int64_t rows : {low, high})
        if (rows > 0)
          s.halos.emplace_back(axis, rows * row);
    }
    // In a group of two each member receives one side: its extent grows by
    // that side's rows, the largest by max(low, high).
    widened[w.dim] += n == 2 ? std::max(low, high) : low + high;
  }
}

OpLayouts OpShardingSpace::evaluate(Operation *op, const ShardingRule &rule,
                                    ArrayRef<Value> results,
                                    Assignment assignment, bool keepPartials) {
  OpLayouts s;
  // Factors that must stay whole.
  for (auto [f, kind] : llvm::enumerate(rule.factorKinds)) {
    if (!assignment[f])
      continue;
    if (kind == ShardingRule::FactorKind::NeedReplication ||
        rule.factorSizes[f] == ShapedType::kDynamic)
      assignment[f].reset();
  }
  // Reduction factors: sharded only with a known combiner and identity init.
  std::optional<ReduceOp> combiner;
  bool identityInit = false;
  bool reductionSharded = false;
  for (auto [f, kind] : llvm::enumerate(rule.factorKinds)) {
    if (!assignment[f] || kind != ShardingRule::FactorKind::Reduction)
      continue;
    if (!combiner)
      combiner = reductionKind(op, identityInit);
    bool ok = combiner && identityInit;
    if (!ok)
      assignment[f].reset();
    else
      reductionSharded = true;
  }
  // Partial operands that stay partial.
  SmallVector<std::optional<ReduceOp>> resultPartials(meshRank);
  if (reductionSharded)
    for (auto [f, kind] : llvm::enumerate(rule.factorKinds))
      if (assignment[f] && kind == ShardingRule::FactorKind::Reduction)
        for (const Split &sp : assignment[f]->splits)
          resultPartials[sp.axis] = *combiner;
  uint64_t used = 0;
  for (auto &a : assignment)
    if (a)
      used |= axisMask(*a);
  llvm::SmallBitVector partialOperands(op->getNumOperands());
  SmallVector<std::optional<ReduceOp>> kept(meshRank);
  if (keepPartials)
    kept = this->keptPartials(op, used, resultPartials, partialOperands);
  for (auto [axis, p] : llvm::enumerate(kept))
    if (p)
      resultPartials[axis] = p;
  // Required operand layouts and result layouts.
  unsigned tensorIndex = 0;
  for (OpOperand &use : op->getOpOperands()) {
    Value v = use.get();
    if (!isa<RankedTensorType>(v.getType()))
      continue;
    std::optional<Layout> l = project(rule, rule.operands[tensorIndex],
                                      assignment, meshShape, meshRank);
    if (!l)
      return s;
    if (partialOperands.test(use.getOperandNumber()))
      for (auto [axis, p] : llvm::enumerate(kept))
        l->setPartial(axis, p);
    if (!fits(*l, v, meshShape))
      return s;
    addHalos(rule, tensorIndex, *l, cast<RankedTensorType>(v.getType()),
             meshShape, s);
    s.operandLayouts.push_back(*l);
    ++tensorIndex;
  }
  for (auto [i, v] : llvm::enumerate(results)) {
    std::optional<Layout> l =
        project(rule, rule.results[i], assignment, meshShape, meshRank);
    if (!l)
      return s;
    for (auto [axis, p] : llvm::enumerate(resultPartials))
      if (p)
        l->setPartial(axis, p);
    if (!fits(*l, v, meshShape))
      return s;
    s.resultLayouts.push_back(*l);
  }
  for (auto &a : assignment)
    if (a)
      s.shardedWork *= splitCount(*a, meshShape);
  s.valid = true;
  return s;
}

OpLayouts OpShardingSpace::replicated(Operation *op) const {
  OpLayouts s;
  s.operandLayouts.assign(tensorValues(op->getOperands()).size(),
                          Layout(meshRank));
  s.resultLayouts.assign(tensorValues(op->getResults()).size(),
                         Layout(meshRank));
  s.valid = true;
  return s;
}

std::optional<ReduceOp> OpShardingSpace::reductionKind(Operation *op,
                                                       bool &identityInit) {
  OpFacts &f = facts[op];
  if (!f.askedReduction) {
    auto ruleOp = cast<ShardingRuleOpInterface>(op);
    f.reduction = ruleOp.getReductionKind();
    f.identityInit = f.reduction && ruleOp.hasIdentityInit();
    f.askedReduction = true;
  }
  identityInit = f.identityInit;
  return f.reduction;
}

bool OpShardingSpace::isLinearIn(Operation *op,
                                 const llvm::SmallBitVector &partial) {
  for (auto &[bits, linear] : facts[op].linear)
    if (bits == partial)
      return linear;
  bool linear = cast<ShardingRuleOpInterface>(op).isLinearIn(partial);
  facts[op].linear.emplace_back(partial, linear);
  return linear;
}

bool OpShardingSpace::contextKey(Operation *op, const ShardingRule &rule,
                                 ArrayRef<LayoutAttr> operandAttrs,
                                 SmallVectorImpl<uintptr_t> &key) {
  // The op's own part, built once per op (the search keys an op each time
  // it looks at it).
  OpFacts &f = facts[op];
  if (!f.keyed) {
    SmallVector<uintptr_t, 12> &own = f.staticKey;
    own.clear();
    own.push_back(
        reinterpret_cast<uintptr_t>(op->getName().getAsOpaquePointer()));
    own.push_back(f.ruleId);
    for (Type t : op->getOperandTypes())
      own.push_back(reinterpret_cast<uintptr_t>(t.getAsOpaquePointer()));
    own.push_back(~uintptr_t(0));
    for (Type t : op->getResultTypes())
      own.push_back(reinterpret_cast<uintptr_t>(t.getAsOpaquePointer()));
    own.push_back(~uintptr_t(0));
    // What evaluate asks of the op's body.
    f.reductionKey.clear();
    if (llvm::is_contained(rule.factorKinds,
                           ShardingRule::FactorKind::Reduction)) {
      bool identityInit;
      std::optional<ReduceOp> kind = reductionKind(op, identityInit);
      f.reductionKey.push_back(kind ? static_cast<uintptr_t>(*kind) + 1 : 0);
      f.reductionKey.push_back(identityInit);
    }
    f.keyed = true;
  }
  key.append(f.staticKey.begin(), f.staticKey.end());
  appendAttrs(key, operandAttrs);
  key.append(f.reductionKey.begin(), f.reductionKey.end());
  // keptPartials asks isLinearIn of a subset of the operands that are
  // Partial of sum or avg only: all the answers it could get.
  SmallVector<unsigned, 4> partial;
  unsigned tensorIndex = 0;
  for (OpOperand &use : op->getOpOperands()) {
    if (!isa<RankedTensorType>(use.get().getType()))
      continue;
    const Layout &l = operandAttrs[tensorIndex++].getLayout();
    if (l.hasPartial() &&
        llvm::all_of(l.getPartials(), [](std::optional<ReduceOp> p) {
          return !p || *p == ReduceOp::Sum || *p == ReduceOp::Avg;
        }))
      partial.push_back(use.getOperandNumber());
  }
  if (partial.size() > kMaxKeyedPartials)
    return false;
  for (unsigned subset = 1; subset < (1u << partial.size()); ++subset) {
    llvm::SmallBitVector bits(op->getNumOperands());
    for (auto [i, operand] : llvm::enumerate(partial))
      if (subset >> i & 1)
        bits.set(operand);
    key.push_back(isLinearIn(op, bits));
  }
  return true;
}
