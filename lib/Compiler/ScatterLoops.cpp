//===- ScatterLoops.cpp - Masked accumulations as scatter loops -----------===//
//
// Part of ShardX.
//
// The importer writes an accumulation into rows of a table (index_put with
// accumulate, the embedding's backward, scatter_add) as a linalg.generic
// that sums, for every row v of the table, the values whose index equals v:
// a reduction over the indices, masked by a comparison with linalg.index.
// That is what sharding propagation reads (the table's rows are a parallel
// dim, so a vocabulary-parallel table needs no rule of its own), but run as
// written it costs rows x width x indices: the 50304-row embedding of a
// GPT-2 step at 8 x 1024 tokens was one 455 ms kernel of a 1.7 s step on
// an H200, and the CPU has the same loop nest.
//
// After bufferization, each such generic becomes the scatter it means:
// every index visited once, its row found by inverting the comparison, and
// the value added there when the row lies in the table (or in this rank's
// rows of it). The sums run over the indices in the generic's own order,
// so the result is the masked sum's (but for the sign of a zero: a row no
// index hits keeps its initial -0.0 instead of -0.0 + 0.0).
//
//   linalg.generic {iterator_types = ["parallel", "parallel", "reduction"]}
//       ins(%idx : memref<8xi64>, %val : memref<8x768xf32>)
//       outs(%table : memref<50304x768xf32>) {
//     %v = linalg.index 0 ; %t = arith.index_cast %i ; %hit = cmpi eq %v, %t
//     %x = select %hit, %val, 0.0 ; %s = addf %acc, %x ; linalg.yield %s }
// becomes (ScatterOrder::IndicesOuter, the CPU's: contiguous rows inside)
//   scf.for %i = 0 to 8 {
//     %row = index_cast %idx[%i]
//     scf.if (0 <= %row < 50304) {
//       scf.for %d = 0 to 768 { %table[%row, %d] += %val[%i, %d] } } }
// or (ScatterOrder::RowsParallel, the GPU's: a thread per block of rows
// and column, each visiting every index in order and adding those whose row
// is in its block: no atomics, the same sums as the CPU)
//   scf.parallel (%rb, %d) = (0, 0) to (85, 768) {
//     scf.for %i = 0 to 8 { ... if (592 %rb <= row < 592 %rb + 592) ... } }
// (blocks for about 65,536 threads, rowBlocks; here 85 of 592 rows).
//
//===----------------------------------------------------------------------===//

#include "shardx/Compiler/Compiler.h"
#include "shardx/Compiler/Passes.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Pass/Pass.h"
#include "llvm/ADT/SetVector.h"

using namespace mlir;

namespace {

/// A masked accumulation: the generic, its row dim, the comparison's side
/// that reads the indices (`target`), and the chain of index additions and
/// subtractions from `linalg.index rowDim` to the other side.
struct MaskedScatter {
  linalg::GenericOp op;
  unsigned rowDim;
  Value target;
  /// The comparison of the row with the target (true where a visit adds).
  arith::CmpIOp cmp;
  /// From the comparison's operand down to the linalg.index (exclusive).
  SmallVector<Operation *> chain;
};

/// Whether `v` is defined outside `op`'s body (a loop-invariant offset).
bool isInvariant(Value v, linalg::GenericOp op) {
  return !op.getRegion().isAncestor(v.getParentRegion());
}

/// The linalg.index ops of `op`'s body that `v` depends on, and whether it
/// depends on the output's block argument.
void dependencies(Value v, linalg::GenericOp op,
                  SmallVectorImpl<linalg::IndexOp> &indices, bool &readsAcc) {
  SmallVector<Value> work{v};
  llvm::SmallPtrSet<Value, 16> seen;
  BlockArgument acc = op.getRegionOutputArgs()[0];
  while (!work.empty()) {
    Value x = work.pop_back_val();
    if (!seen.insert(x).second || isInvariant(x, op))
      continue;
    if (x == acc) {
      readsAcc = true;
      continue;
    }
    Operation *def = x.getDefiningOp();
    if (!def)
      continue; // an input's block argument
    if (auto idx = dyn_cast<linalg::IndexOp>(def))
      indices.push_back(idx);
    for (Value operand : def->getOperands())
      work.push_back(operand);
  }
}

/// Follows `v` down to a linalg.index through index additions and
/// subtractions of loop invariants; fills `chain` (outermost first).
linalg::IndexOp indexChain(Value v, linalg::GenericOp op,
                           SmallVectorImpl<Operation *> &chain) {
  while (true) {
    Operation *def = v.getDefiningOp();
    if (!def || isInvariant(v, op))
      return nullptr;
    if (auto idx = dyn_cast<linalg::IndexOp>(def))
      return idx;
    if (!isa<arith::AddIOp, arith::SubIOp>(def) || !v.getType().isIndex())
      return nullptr;
    Value lhs = def->getOperand(0), rhs = def->getOperand(1);
    if (isInvariant(rhs, op)) {
      chain.push_back(def);
      v = lhs;
    } else if (isa<arith::AddIOp>(def) && isInvariant(lhs, op)) {
      chain.push_back(def);
      v = rhs;
    } else {
      return nullptr; // c - x and x + y are not handled
    }
  }
}

bool isZero(Value v) {
  return matchPattern(v, m_AnyZeroFloat()) || matchPattern(v, m_Zero());
}

std::optional<MaskedScatter> match(linalg::GenericOp op) {
  if (!op.hasPureBufferSemantics() || op.getNumDpsInits() != 1 ||
      op.getNumReductionLoops() == 0 || op.getNumParallelLoops() == 0 ||
      op->getParentOfType<scf::ParallelOp>())
    return std::nullopt;
  Block *body = op.getBlock();
  BlockArgument acc = op.getRegionOutputArgs()[0];
  auto yield = cast<linalg::YieldOp>(body->getTerminator());
  Operation *add = yield.getValues()[0].getDefiningOp();
  if (!add || !isa<arith::AddFOp, arith::AddIOp>(add) || !acc.hasOneUse() ||
      acc.getUses().begin()->getOwner() != add)
    return std::nullopt;
  Value term = add->getOperand(0) == acc ? add->getOperand(1)
                                         : add->getOperand(0);
  auto select = term.getDefiningOp<arith::SelectOp>();
  if (!select || !isZero(select.getFalseValue()))
    return std::nullopt;
  auto cmp = select.getCondition().getDefiningOp<arith::CmpIOp>();
  if (!cmp || cmp.getPredicate() != arith::CmpIPredicate::eq)
    return std::nullopt;
  MaskedScatter m;
  m.op = op;
  m.cmp = cmp;
  linalg::IndexOp row;
  for (int side = 0; side < 2 && !row; ++side) {
    m.chain.clear();
    row = indexChain(cmp->getOperand(side), op, m.chain);
    m.target = cmp->getOperand(1 - side);
  }
  if (!row)
    return std::nullopt;
  m.rowDim = row.getDim();
  SmallVector<utils::IteratorType> iterators = op.getIteratorTypesArray();
  if (iterators[m.rowDim] != utils::IteratorType::parallel)
    return std::nullopt;
  // The row index feeds the comparison only.
  Value chainTop = m.chain.empty() ? Value(row.getResult())
                                   : m.chain.front()->getResult(0);
  for (Operation *user : row->getUsers())
    if (user != (m.chain.empty() ? cmp.getOperation() : m.chain.back()))
      return std::nullopt;
  for (Operation *link : m.chain)
    if (!link->hasOneUse())
      return std::nullopt;
  if (!chainTop.hasOneUse() || !cmp->hasOneUse())
    return std::nullopt;
  // The target depends on neither the row nor the accumulator, and the
  // inputs it reads do not move with the row.
  SmallVector<linalg::IndexOp> used;
  bool readsAcc = false;
  dependencies(m.target, op, used, readsAcc);
  if (readsAcc || llvm::any_of(used, [&](linalg::IndexOp i) {
        return i.getDim() == m.rowDim;
      }))
    return std::nullopt;
  for (OpOperand *in : op.getDpsInputOperands())
    if (op.getMatchingIndexingMap(in).isFunctionOfDim(m.rowDim) &&
        !op.getMatchingBlockArgument(in).use_empty())
      return std::nullopt; // an input read at the row: not a scatter
  // The table is indexed by every parallel dim and no reduction dim.
  AffineMap out = op.getMatchingIndexingMap(op.getDpsInitOperand(0));
  if (!out.isProjectedPermutation())
    return std::nullopt;
  for (unsigned d = 0; d < iterators.size(); ++d)
    if (out.isFunctionOfDim(d) != (iterators[d] == utils::IteratorType::parallel))
      return std::nullopt;
  return m;
}

/// The ops of `op`'s body that `v` is computed by (none for a block
/// argument or an invariant), and the input block arguments they read.
void sliceOf(Value v, linalg::GenericOp op, llvm::SetVector<Operation *> &ops,
             llvm::SmallPtrSetImpl<Value> &args) {
  SmallVector<Value> work{v};
  while (!work.empty()) {
    Value x = work.pop_back_val();
    if (isInvariant(x, op))
      continue;
    if (isa<BlockArgument>(x)) {
      args.insert(x);
      continue;
    }
    Operation *def = x.getDefiningOp();
    if (!ops.insert(def))
      continue;
    for (Value operand : def->getOperands())
      work.push_back(operand);
  }
}

/// Loads, at the loop values `ivs`, each input of `op` whose block argument
/// is in `args` (all used ones when `args` is null).
void loadInputs(OpBuilder &b, Location loc, linalg::GenericOp op,
                ArrayRef<Value> ivs, IRMapping &map,
                const llvm::SmallPtrSetImpl<Value> *args) {
  for (OpOperand *in : op.getDpsInputOperands()) {
    BlockArgument arg = op.getMatchingBlockArgument(in);
    if (arg.use_empty() || (args && !args->contains(arg)))
      continue;
    if (!isa<MemRefType>(in->get().getType())) {
      map.map(arg, in->get());
      continue;
    }
    AffineMap am = op.getMatchingIndexingMap(in);
    SmallVector<Value> indices;
    for (AffineExpr e : am.getResults())
      indices.push_back(affine::AffineApplyOp::create(
          b, loc, AffineMap::get(am.getNumDims(), 0, e), ivs));
    map.map(arg, memref::LoadOp::create(b, loc, in->get(), indices));
  }
}

/// Whether the row of a visit depends on the loop values of `dims`.
bool rowDependsOn(const MaskedScatter &m, ArrayRef<unsigned> dims) {
  linalg::GenericOp op = m.op;
  llvm::SetVector<Operation *> ops;
  llvm::SmallPtrSet<Value, 8> args;
  sliceOf(m.target, op, ops, args);
  for (Operation *o : ops)
    if (auto idx = dyn_cast<linalg::IndexOp>(o))
      if (llvm::is_contained(dims, idx.getDim()))
        return true;
  for (OpOperand *in : op.getDpsInputOperands())
    if (args.contains(op.getMatchingBlockArgument(in)))
      for (unsigned d : dims)
        if (op.getMatchingIndexingMap(in).isFunctionOfDim(d))
          return true;
  return false;
}

/// The table row a visit at `ivs` adds to: the target, then the chain undone
/// (x + c = t gives x = t - c).
Value emitRow(OpBuilder &b, Location loc, const MaskedScatter &m,
              ArrayRef<Value> loopValues) {
  linalg::GenericOp op = m.op;
  // The dims the row does not depend on (the row's own, the columns when
  // it is computed outside their loops) have no loop value yet: 0 stands
  // in for them, which the slice's index maps do not read.
  SmallVector<Value> ivs(loopValues);
  Value zeroIndex;
  for (Value &iv : ivs)
    if (!iv)
      iv = zeroIndex ? zeroIndex
                     : (zeroIndex = arith::ConstantIndexOp::create(b, loc, 0));
  llvm::SetVector<Operation *> ops;
  llvm::SmallPtrSet<Value, 8> args;
  sliceOf(m.target, op, ops, args);
  IRMapping map;
  loadInputs(b, loc, op, ivs, map, &args);
  for (Operation &inner : op.getBlock()->without_terminator()) {
    if (!ops.contains(&inner))
      continue;
    if (auto idx = dyn_cast<linalg::IndexOp>(inner))
      map.map(idx.getResult(), ivs[idx.getDim()]);
    else
      b.clone(inner, map);
  }
  Value row = map.lookupOrDefault(m.target);
  for (Operation *link : m.chain) {
    bool lhsIsRow = !isInvariant(link->getOperand(0), op);
    Value c = link->getOperand(lhsIsRow ? 1 : 0);
    row = isa<arith::AddIOp>(link)
              ? arith::SubIOp::create(b, loc, row, c).getResult()
              : arith::AddIOp::create(b, loc, row, c).getResult();
  }
  return row;
}

/// `if (first <= row < end)`; the builder is left inside it.
void guardRow(OpBuilder &b, Location loc, Value row, Value first, Value end) {
  Value atLeastFirst =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, row, first);
  Value belowEnd =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, row, end);
  Value inTable = arith::AndIOp::create(b, loc, atLeastFirst, belowEnd);
  auto guard = scf::IfOp::create(b, loc, inTable, /*withElseRegion=*/false);
  b.setInsertionPointToStart(guard.thenBlock());
}

/// The table element at `ivs` (the row's loop value set) plus the body's
/// term: the generic's body with the accumulator loaded and the sum stored.
void emitAccumulate(OpBuilder &b, Location loc, const MaskedScatter &m,
                    ArrayRef<Value> ivs) {
  linalg::GenericOp op = m.op;
  IRMapping map;
  loadInputs(b, loc, op, ivs, map, nullptr);
  AffineMap out = op.getMatchingIndexingMap(op.getDpsInitOperand(0));
  SmallVector<Value> at;
  for (AffineExpr e : out.getResults())
    at.push_back(affine::AffineApplyOp::create(
        b, loc, AffineMap::get(out.getNumDims(), 0, e), ivs));
  Value table = op.getDpsInits()[0];
  map.map(op.getRegionOutputArgs()[0],
          memref::LoadOp::create(b, loc, table, at));
  // The comparison holds by construction of the row: true, so that the
  // select folds and the target's loads die.
  Block *body = op.getBlock();
  Value hit = arith::ConstantOp::create(b, loc, b.getBoolAttr(true));
  arith::CmpIOp cmp = m.cmp;
  for (Operation &inner : body->without_terminator()) {
    if (auto idx = dyn_cast<linalg::IndexOp>(inner))
      map.map(idx.getResult(), ivs[idx.getDim()]);
    else if (&inner == cmp.getOperation())
      map.map(cmp.getResult(), hit);
    else
      b.clone(inner, map);
  }
  Value sum = map.lookup(
      cast<linalg::YieldOp>(body->getTerminator()).getValues()[0]);
  memref::StoreOp::create(b, loc, sum, table, at);
}

/// The threads a GPU scatter aims at: a thread per column alone leaves
/// most of a GPU idle (768 threads for a GPT-2 embedding's gradient, each
/// visiting 8,192 tokens: 4.6 ms on an H200).
constexpr int64_t kScatterThreads = 65536;

/// How a GPU scatter splits the table's rows, a thread per block and
/// column: `rows` rows in each of `count` blocks (the last maybe fewer).
struct RowBlocks {
  int64_t rows, count;
};

/// Enough blocks for about kScatterThreads threads; none for one block, or
/// where the rows or the columns are not static.
std::optional<RowBlocks> rowBlocks(linalg::GenericOp op, unsigned rowDim,
                                   ArrayRef<unsigned> columns) {
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  if (ShapedType::isDynamic(ranges[rowDim]) || ranges[rowDim] < 2)
    return std::nullopt;
  int64_t threads = 1;
  for (unsigned d : columns) {
    if (ShapedType::isDynamic(ranges[d]))
      return std::nullopt;
    threads *= ranges[d];
  }
  int64_t rows = ranges[rowDim];
  int64_t blocks =
      std::min(rows, std::max<int64_t>(1, kScatterThreads /
                                              std::max<int64_t>(threads, 1)));
  if (blocks < 2)
    return std::nullopt;
  int64_t perBlock = llvm::divideCeil(rows, blocks);
  return RowBlocks{perBlock, llvm::divideCeil(rows, perBlock)};
}

void rewrite(const MaskedScatter &m, shardx::ScatterOrder order) {
  linalg::GenericOp op = m.op;
  OpBuilder b(op);
  Location loc = op.getLoc();
  SmallVector<Range> ranges =
      cast<linalg::LinalgOp>(op.getOperation()).createLoopRanges(b, loc);
  SmallVector<utils::IteratorType> iterators = op.getIteratorTypesArray();
  auto bound = [&](unsigned d) {
    return getValueOrCreateConstantIndexOp(b, loc, ranges[d].size);
  };
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value one = arith::ConstantIndexOp::create(b, loc, 1);
  Value rows = bound(m.rowDim);
  SmallVector<unsigned> columns, indices;
  for (unsigned d = 0; d < iterators.size(); ++d) {
    if (d == m.rowDim)
      continue;
    (iterators[d] == utils::IteratorType::parallel ? columns : indices)
        .push_back(d);
  }
  SmallVector<Value> ivs(iterators.size());
  // The rows the visits of one thread may add to (ScatterOrder::
  // RowsParallel): [first, end). All of them unless the rows are blocked.
  Value first = zero, end = rows;
  // Nested scf.for loops over `dims`, the builder left in the innermost.
  auto forLoops = [&](ArrayRef<unsigned> dims) {
    for (unsigned d : dims) {
      auto loop = scf::ForOp::create(b, loc, zero, bound(d), one);
      ivs[d] = loop.getInductionVar();
      b.setInsertionPoint(loop.getBody()->getTerminator());
    }
  };
  auto visit = [&] {
    Value row = emitRow(b, loc, m, ivs);
    guardRow(b, loc, row, first, end);
    ivs[m.rowDim] = row;
  };
  if (order == shardx::ScatterOrder::RowsParallel) {
    // Blocks of rows and the columns in parallel (one iteration where
    // there are neither), the indices in order inside each: a thread adds
    // the visits whose row lies in its block.
    std::optional<RowBlocks> blocks = rowBlocks(op, m.rowDim, columns);
    SmallVector<Value> lbs, ubs, steps;
    if (blocks) {
      lbs.push_back(zero);
      ubs.push_back(arith::ConstantIndexOp::create(b, loc, blocks->count));
      steps.push_back(one);
    }
    for (unsigned d : columns) {
      lbs.push_back(zero);
      ubs.push_back(bound(d));
      steps.push_back(one);
    }
    if (lbs.empty()) {
      lbs.push_back(zero);
      ubs.push_back(one);
      steps.push_back(one);
    }
    auto loop = scf::ParallelOp::create(b, loc, lbs, ubs, steps);
    SmallVector<Value> loopIvs(loop.getInductionVars());
    b.setInsertionPoint(loop.getBody()->getTerminator());
    if (blocks) {
      Value size = arith::ConstantIndexOp::create(b, loc, blocks->rows);
      first = arith::MulIOp::create(b, loc, loopIvs.front(), size);
      end = arith::MinSIOp::create(
          b, loc, arith::AddIOp::create(b, loc, first, size), rows);
      loopIvs.erase(loopIvs.begin());
    }
    for (auto [d, iv] : llvm::zip(columns, loopIvs))
      ivs[d] = iv;
    forLoops(indices);
    visit();
  } else if (!rowDependsOn(m, columns)) {
    // The row once per index, then its columns (contiguous).
    forLoops(indices);
    visit();
    forLoops(columns);
  } else {
    forLoops(indices);
    forLoops(columns);
    visit();
  }
  emitAccumulate(b, loc, m, ivs);
  op.erase();
}

} // namespace

int64_t mlir::shardx::lowerMaskedScatters(ModuleOp module, ScatterOrder order) {
  SmallVector<MaskedScatter> found;
  module.walk([&](linalg::GenericOp op) {
    if (std::optional<MaskedScatter> m = match(op))
      found.push_back(*m);
  });
  for (const MaskedScatter &m : found)
    rewrite(m, order);
  return static_cast<int64_t>(found.size());
}

namespace mlir::shardx {
#define GEN_PASS_DEF_LOWERMASKEDSCATTERSPASS
#include "shardx/Compiler/Passes.h.inc"
} // namespace mlir::shardx

namespace {

struct LowerMaskedScattersPass
    : shardx::impl::LowerMaskedScattersPassBase<LowerMaskedScattersPass> {
  using LowerMaskedScattersPassBase::LowerMaskedScattersPassBase;
  void runOnOperation() override {
    if (order != "cpu" && order != "gpu") {
      getOperation().emitError("shardx-lower-masked-scatters: order must be "
                               "cpu or gpu, not '")
          << order << "'";
      return signalPassFailure();
    }
    shardx::lowerMaskedScatters(getOperation(),
                                order == "cpu"
                                    ? shardx::ScatterOrder::IndicesOuter
                                    : shardx::ScatterOrder::RowsParallel);
  }
};

} // namespace
