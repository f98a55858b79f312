//===- CpuOptimize.cpp - Fusion and BLAS contractions for the CPU target --===//
//
// Part of ShardX.
//
// Two rewrites around bufferization:
//
// - On tensors (`shardx-fuse-tensor-ops`): transposes and broadcasts become
//   generics and are folded into the ops that read them (a GEMM operand
//   becomes a transposed view, not a copy); a transpose of a contraction's
//   result becomes the contraction writing the transposed result; chains of
//   elementwise ops fuse into one loop nest.
// - On buffers (`shardx-contractions-to-blas`): every contraction that
//   is a (batched) GEMM up to operand and result permutations becomes one
//   runtime call on OpenBLAS, with transposed operands passed as views (BLAS
//   transpose flags) and a zero fill of the result folded into beta = 0.
//
//===----------------------------------------------------------------------===//

#include "Contractions.h"

#include "shardx/Analysis/MemoryModel.h"
#include "shardx/Compiler/Compiler.h"
#include "shardx/Compiler/Passes.h"
#include "shardx/Conversion/Passes.h"
#include "shardx/Dialect/ShardX/IR/LibraryNames.h"
#include "shardx/Dialect/ShardX/IR/RuntimeDType.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "shardx-cpu-optimize"

using namespace mlir;

namespace {

/// A generic that only moves elements: one input, one init, all loops
/// parallel, the body yields the input element, the input map a projected
/// permutation (a transpose, a broadcast or a copy) and the output map a
/// permutation.
bool isDataMovement(linalg::GenericOp op) {
  if (op.getNumDpsInputs() != 1 || op.getNumDpsInits() != 1 ||
      op.getNumReductionLoops() != 0)
    return false;
  auto yield = cast<linalg::YieldOp>(op.getBody()->getTerminator());
  if (yield.getNumOperands() != 1 ||
      yield.getOperand(0) != op.getBody()->getArgument(0))
    return false;
  SmallVector<AffineMap> maps = op.getIndexingMapsArray();
  return maps[0].isProjectedPermutation() && maps[1].isPermutation();
}

/// A transpose: data movement whose input map is a permutation.
bool isTranspose(linalg::GenericOp op) {
  return isDataMovement(op) && op.getIndexingMapsArray()[0].isPermutation();
}

} // namespace

std::optional<linalg::ContractionDimensions>
mlir::shardx::matchGemm(linalg::LinalgOp op, bool allowWidening) {
  if (op->getNumResults() > 1 || op.getNumDpsInputs() != 2 ||
      op.getNumDpsInits() != 1 || !linalg::isaContractionOpInterface(op))
    return std::nullopt;
  FailureOr<linalg::ContractionDimensions> dims =
      linalg::inferContractionDims(op);
  if (failed(dims) || dims->batch.size() > 1 || dims->m.size() != 1 ||
      dims->n.size() != 1 || dims->k.size() != 1)
    return std::nullopt;
  Type elt = getElementTypeOrSelf(op->getOperand(0).getType());
  Type out = getElementTypeOrSelf(op.getDpsInits()[0].getType());
  if (getElementTypeOrSelf(op->getOperand(1).getType()) != elt)
    return std::nullopt;
  if (out != elt &&
      !(allowWidening && (elt.isBF16() || elt.isF16()) && out.isF32()))
    return std::nullopt;
  // Every loop is one of the four kinds and each operand reads exactly its
  // own dims (no diagonals, no broadcasts).
  unsigned expected = dims->batch.size() + 3;
  if (op.getNumLoops() != expected)
    return std::nullopt;
  for (AffineMap map : op.getIndexingMapsArray())
    if (!map.isProjectedPermutation() ||
        map.getNumResults() != dims->batch.size() + 2)
      return std::nullopt;
  // A GEMM multiplies its operands' elements as they are (widened exactly,
  // where allowed). The contraction interface also takes casts between an
  // operand and the product: an operand rounded to bf16 and widened back
  // (`x.bfloat16() @ y.bfloat16()` of f32 tensors, autocast, after fusion)
  // would be multiplied unrounded by the BLAS call.
  if (auto generic = dyn_cast<linalg::GenericOp>(op.getOperation())) {
    for (Operation &inner : generic.getBody()->without_terminator()) {
      auto ext = dyn_cast<arith::ExtFOp>(inner);
      if (ext && isa<BlockArgument>(ext.getIn()))
        continue;
      if (isa<arith::ExtFOp, arith::TruncFOp, arith::SIToFPOp, arith::UIToFPOp,
              arith::FPToSIOp, arith::FPToUIOp, arith::BitcastOp>(inner))
        return std::nullopt;
    }
  }
  return *dims;
}

namespace {

//===----------------------------------------------------------------------===//
// Tensor-level rewrites
//===----------------------------------------------------------------------===//

/// transpose(contraction(a, b) into fill(c, 0)) -> contraction writing the
/// transposed result: C^T is computed in place of C and a copy.
///
///   %c = linalg.generic {maps = [A, B, (m, n, k) -> (m, n)]} ... -> 64x32
///   %t = linalg.generic {transpose (i, j) -> (j, i)} ins(%c) -> 32x64
/// becomes
///   %t = linalg.generic {maps = [A, B, (m, n, k) -> (n, m)]} ... -> 32x64
struct FoldTransposeOfResult : OpRewritePattern<linalg::GenericOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(linalg::GenericOp transpose,
                                PatternRewriter &rewriter) const override {
    if (!isTranspose(transpose) || !transpose.hasPureTensorSemantics())
      return failure();
    auto producer =
        transpose.getDpsInputs()[0].getDefiningOp<linalg::GenericOp>();
    if (!producer || producer->getNumResults() != 1 ||
        !producer->getResult(0).hasOneUse() ||
        !mlir::shardx::matchGemm(producer))
      return failure();
    // Only a fresh zero-filled accumulator can be permuted for free.
    auto fill = producer.getDpsInits()[0].getDefiningOp<linalg::FillOp>();
    if (!fill || !fill.getOutputs()[0].getDefiningOp<tensor::EmptyOp>())
      return failure();
    SmallVector<AffineMap> tmaps = transpose.getIndexingMapsArray();
    // out[j] = in[p(j)] with p = in-map o out-map^-1; the producer's result
    // index r goes to j = p^-1(r).
    AffineMap p = tmaps[0].compose(inversePermutation(tmaps[1]));
    AffineMap pInv = inversePermutation(p);
    SmallVector<AffineMap> maps = producer.getIndexingMapsArray();
    maps.back() = pInv.compose(maps.back());
    Location loc = producer.getLoc();
    auto resultType = cast<RankedTensorType>(transpose.getResult(0).getType());
    auto empty = tensor::EmptyOp::create(rewriter, loc, resultType.getShape(),
                                         resultType.getElementType());
    Value init = linalg::FillOp::create(rewriter, loc, fill.getInputs()[0],
                                        empty.getResult())
                     .getResult(0);
    auto fused = linalg::GenericOp::create(
        rewriter, loc, TypeRange{resultType}, producer.getDpsInputs(),
        ValueRange{init}, maps, producer.getIteratorTypesArray());
    rewriter.inlineRegionBefore(producer.getRegion(), fused.getRegion(),
                                fused.getRegion().begin());
    rewriter.replaceOp(transpose, fused.getResults());
    rewriter.eraseOp(producer);
    return success();
  }
};

/// Named ops that read or move data through indexing maps become generics,
/// so that fusion sees them: transposes, broadcasts and the matmul family.
LogicalResult generalizeForFusion(ModuleOp module) {
  IRRewriter rewriter(module.getContext());
  SmallVector<linalg::LinalgOp> ops;
  module.walk([&](linalg::LinalgOp op) {
    if (isa<linalg::TransposeOp, linalg::BroadcastOp, linalg::MatmulOp,
            linalg::BatchMatmulOp>(op.getOperation()) &&
        op.hasPureTensorSemantics())
      ops.push_back(op);
  });
  for (linalg::LinalgOp op : ops) {
    rewriter.setInsertionPoint(op);
    if (failed(linalg::generalizeNamedOp(rewriter, op)))
      return op->emitError("cannot generalize for fusion");
  }
  return success();
}

/// The bytes a buffer of `type` takes as a kernel parameter where buffers
/// pass as memref descriptors (the cuda target's kernels): an allocated and
/// an aligned pointer, an offset, and a size and a stride per dim, 8 bytes
/// each. Not a shaped type (a scalar operand): 8.
int64_t descriptorBytes(Type type) {
  auto shaped = dyn_cast<ShapedType>(type);
  return shaped ? 8 * (3 + 2 * shaped.getRank()) : 8;
}

/// The descriptor bytes of the distinct operands of the op that fusing the
/// producer of `operand` into its consumer makes: the consumer's other
/// operands, the producer's inputs, the producer's inits its body reads or
/// whose result another op reads (the fusion keeps that result), and the
/// values both bodies capture from above (a gather's table: a kernel
/// parameter too once bufferized).
int64_t fusedDescriptorBytes(OpOperand *operand, linalg::GenericOp producer) {
  llvm::SetVector<Value> operands;
  Operation *consumer = operand->getOwner();
  for (OpOperand &other : consumer->getOpOperands())
    if (&other != operand)
      operands.insert(other.get());
  for (OpOperand *input : producer.getDpsInputOperands())
    operands.insert(input->get());
  for (auto [init, result] :
       llvm::zip_equal(producer.getDpsInitsMutable(), producer->getResults()))
    if (producer.payloadUsesValueFromOperand(&init) ||
        llvm::any_of(result.getUsers(),
                     [&](Operation *user) { return user != consumer; }))
      operands.insert(init.get());
  llvm::SetVector<Value> captured;
  getUsedValuesDefinedAbove(producer->getRegions(), captured);
  getUsedValuesDefinedAbove(consumer->getRegions(), captured);
  for (Value value : captured)
    if (isa<ShapedType>(value.getType()))
      operands.insert(value);
  int64_t bytes = 0;
  for (Value value : operands)
    bytes += descriptorBytes(value.getType());
  return bytes;
}

/// Whether `op`'s body calls a math function (an exp, a log, an erf).
bool callsMathFunction(linalg::GenericOp op) {
  return llvm::any_of(op.getBody()->getOperations(), [](Operation &inner) {
    return isa<math::MathDialect>(inner.getDialect());
  });
}

/// Whether fusing the producer of `operand` into its consumer is worth it:
/// a transpose always (it becomes an indexing map, a GEMM operand a view);
/// other elementwise producers with one use, except into a GEMM (which must
/// stay a pure multiply-add to become a BLAS call) and except a producer
/// with a math function (a log, an exp) that the consumer reads broadcast:
/// fused, the function would run once per consumer element (attention's
/// log-sum-exp per row, read by every key's probability) instead of once.
///
/// With `maxOperandBytes` > 0, also not a fusion whose op would take more
/// bytes of buffer descriptors than that (see `descriptorBytes`).
bool shouldFuse(OpOperand *operand, int64_t maxOperandBytes) {
  auto producer = operand->get().getDefiningOp<linalg::GenericOp>();
  auto consumer = dyn_cast<linalg::GenericOp>(operand->getOwner());
  if (!producer || !consumer)
    return false;
  if (maxOperandBytes > 0 &&
      fusedDescriptorBytes(operand, producer) > maxOperandBytes)
    return false;
  if (isTranspose(producer))
    return true;
  if (mlir::shardx::matchGemm(consumer))
    return false;
  if (isDataMovement(producer))
    return true;
  if (!producer->hasOneUse())
    return false;
  bool broadcast = producer.getNumLoops() < consumer.getNumLoops();
  return !(broadcast && callsMathFunction(producer));
}

/// A generic whose loops are all parallel and whose operands (tensors, no
/// scalar) are all read and written through identity maps: the same op on
/// any reshape of all its operands.
bool isIdentityElementwise(linalg::GenericOp op) {
  return op->getNumResults() == 1 && op.getNumReductionLoops() == 0 &&
         op.hasPureTensorSemantics() &&
         llvm::all_of(op.getIndexingMapsArray(),
                      [](AffineMap map) { return map.isIdentity(); }) &&
         op.getBody()->getOps<linalg::IndexOp>().empty() &&
         !op.payloadUsesValueFromOperand(op.getDpsInitOperand(0)) &&
         llvm::all_of(op.getDpsInputs(), [](Value input) {
           return isa<RankedTensorType>(input.getType());
         });
}

/// Whether `outer` undoes `inner`'s reshape (a collapse of an expand by the
/// same dims back to its shape, or the reverse; element types may differ).
bool undoes(Operation *outer, Operation *inner) {
  auto expand = [](Operation *op) {
    return dyn_cast<tensor::ExpandShapeOp>(op);
  };
  auto collapse = [](Operation *op) {
    return dyn_cast<tensor::CollapseShapeOp>(op);
  };
  if (auto c = collapse(outer); c && inner && expand(inner))
    return c.getResultType().getShape() ==
               expand(inner).getSrcType().getShape() &&
           c.getReassociationIndices() ==
               expand(inner).getReassociationIndices();
  if (auto e = expand(outer); e && inner && collapse(inner))
    return e.getResultType().getShape() ==
               collapse(inner).getSrcType().getShape() &&
           e.getReassociationIndices() ==
               collapse(inner).getReassociationIndices();
  return false;
}

/// A reshape of an elementwise op that reads a reshape it undoes: the op
/// on the unreshaped operands, so that it fuses with their producer and
/// with its readers (the importer's 3-d <-> 2-d reshapes around GEMMs
/// otherwise cut a GEMM's bf16 result widened to f32 off from the
/// cross-entropy that reads it, and a gradient from its narrowing).
///
///   %e = tensor.expand_shape %x : 8192x50304 into 8x1024x50304
///   %w = linalg.generic {identity maps} ins(%e) -> 8x1024x50304xf32
///   %c = tensor.collapse_shape %w : 8x1024x50304 into 8192x50304
/// becomes
///   %c = linalg.generic {identity maps} ins(%x) -> 8192x50304xf32
///
/// Other operands are reshaped alike; the op may be reshaped so several
/// times (read by the forward and by the backward). Each rewrite removes at
/// least a pair of reshapes, so the patterns end.
template <typename ReshapeOp>
struct ElementwiseThroughReshapes : OpRewritePattern<ReshapeOp> {
  using OpRewritePattern<ReshapeOp>::OpRewritePattern;
  LogicalResult matchAndRewrite(ReshapeOp reshape,
                                PatternRewriter &rewriter) const override {
    auto op = reshape.getSrc().template getDefiningOp<linalg::GenericOp>();
    if (!op || !isIdentityElementwise(op) ||
        !reshape.getResultType().hasStaticShape())
      return failure();
    // Every reader is this same reshape (the forward's and the backward's).
    SmallVector<ReshapeOp> reshapes;
    for (Operation *user : op->getUsers()) {
      auto other = dyn_cast<ReshapeOp>(user);
      if (!other || other.getResultType() != reshape.getResultType() ||
          other.getReassociationIndices() != reshape.getReassociationIndices())
        return failure();
      reshapes.push_back(other);
    }
    if (llvm::none_of(op.getDpsInputs(), [&](Value input) {
          return undoes(reshape, input.getDefiningOp());
        }))
      return failure();
    Location loc = op.getLoc();
    RankedTensorType type = reshape.getResultType();
    rewriter.setInsertionPoint(op);
    SmallVector<Value> inputs;
    for (Value input : op.getDpsInputs()) {
      if (undoes(reshape, input.getDefiningOp())) {
        inputs.push_back(input.getDefiningOp()->getOperand(0));
        continue;
      }
      auto inputType = RankedTensorType::get(
          type.getShape(), getElementTypeOrSelf(input.getType()));
      inputs.push_back(ReshapeOp::create(rewriter, loc, inputType, input,
                                         reshape.getReassociationIndices()));
    }
    Value init = tensor::EmptyOp::create(rewriter, loc, type.getShape(),
                                         type.getElementType());
    SmallVector<AffineMap> maps(
        inputs.size() + 1, rewriter.getMultiDimIdentityMap(type.getRank()));
    SmallVector<utils::IteratorType> iterators(type.getRank(),
                                               utils::IteratorType::parallel);
    auto moved =
        linalg::GenericOp::create(rewriter, loc, TypeRange{type}, inputs,
                                  ValueRange{init}, maps, iterators);
    rewriter.cloneRegionBefore(op.getRegion(), moved.getRegion(),
                               moved.getRegion().begin());
    for (ReshapeOp each : reshapes)
      rewriter.replaceOp(each, moved.getResults());
    rewriter.eraseOp(op);
    return success();
  }
};

/// One element of an elementwise op's result, computed from its operands'
/// elements instead of read from the op's whole result: the log-softmax
/// value at each row's target that a cross-entropy gathers, which otherwise
/// kept the whole [tokens, vocabulary] f32 log-softmax alive and written.
///
///   %v = tensor.extract %t[%i, %j]  // %t = generic {maps} ins(%a, %b)
/// becomes
///   %v = <the body>(%a[map_a(%i, %j)], %b[map_b(%i, %j)])
struct ExtractOfElementwise : OpRewritePattern<tensor::ExtractOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(tensor::ExtractOp extract,
                                PatternRewriter &rewriter) const override {
    // Arithmetic alone: the body runs once per extract, which may be inside
    // a loop nest that reads the op broadcast (a math function would then run
    // once per element of that nest instead of once per element of the op).
    auto op = extract.getTensor().getDefiningOp<linalg::GenericOp>();
    if (!op || !mlir::shardx::isArithmeticElementwise(op))
      return failure();
    AffineMap out = op.getIndexingMapsArray().back();
    if (!out.isPermutation() || llvm::any_of(op.getDpsInputs(), [](Value v) {
          return !isa<RankedTensorType>(v.getType());
        }))
      return failure();
    if (llvm::any_of(op.getDpsInputOperands(), [&](OpOperand *input) {
          return !op.getMatchingIndexingMap(input).isProjectedPermutation();
        }))
      return failure();
    // The loop indices of the extracted element.
    SmallVector<Value> loops(op.getNumLoops());
    for (auto [k, index] : llvm::enumerate(extract.getIndices()))
      loops[out.getDimPosition(k)] = index;
    Location loc = extract.getLoc();
    IRMapping mapping;
    for (OpOperand *input : op.getDpsInputOperands()) {
      AffineMap map = op.getMatchingIndexingMap(input);
      SmallVector<Value> indices;
      for (unsigned r = 0; r < map.getNumResults(); ++r)
        indices.push_back(loops[map.getDimPosition(r)]);
      mapping.map(
          op.getMatchingBlockArgument(input),
          tensor::ExtractOp::create(rewriter, loc, input->get(), indices));
    }
    for (Operation &inner : op.getBody()->without_terminator()) {
      if (auto index = dyn_cast<linalg::IndexOp>(inner)) {
        mapping.map(index.getResult(), loops[index.getDim()]);
        continue;
      }
      rewriter.clone(inner, mapping);
    }
    auto yield = cast<linalg::YieldOp>(op.getBody()->getTerminator());
    rewriter.replaceOp(extract, mapping.lookupOrDefault(yield.getOperand(0)));
    return success();
  }
};

/// Gives each elementwise reader (a generic that is not a GEMM, reading it
/// as an input) of a multi-use op that is cheaper to recompute
/// (isCheaperToRecompute) its own copy of that op, right before it; fusion then
/// folds each copy into its reader. Fused as it was (upstream fusion keeps a
/// multi-use producer's result as a second result of the fused op), the
/// producer was still written out in full: the f32 logits and the one-hot
/// gradient of a GPT's cross-entropy, each read back several times. A copy that
/// does not fuse is merged back by the CSE after fusion. With
/// `recomputeMath`, also ops with a math function, into the readers that read
/// them whole (a broadcast reader would run the function once per element it
/// reads instead of once per element of the op). Whether it gave any reader a
/// copy.
bool cloneCheapProducers(ModuleOp module, bool recomputeMath) {
  bool cloned = false;
  SmallVector<linalg::GenericOp> producers;
  module.walk([&](linalg::GenericOp op) {
    if (!op->hasOneUse() && !op->use_empty() &&
        mlir::shardx::isCheaperToRecompute(op, recomputeMath))
      producers.push_back(op);
  });
  OpBuilder builder(module.getContext());
  for (linalg::GenericOp op : producers) {
    bool math = callsMathFunction(op);
    for (OpOperand &use :
         llvm::make_early_inc_range(op->getResult(0).getUses())) {
      auto reader = dyn_cast<linalg::GenericOp>(use.getOwner());
      if (!reader || !reader.isDpsInput(&use) ||
          mlir::shardx::matchGemm(reader) ||
          (math && !reader.getMatchingIndexingMap(&use).isPermutation()))
        continue;
      builder.setInsertionPoint(reader);
      use.set(builder.clone(*op)->getResult(0));
      cloned = true;
    }
    if (op->use_empty())
      op->erase();
  }
  return cloned;
}

//===----------------------------------------------------------------------===//
// Buffer-level rewrite
//===----------------------------------------------------------------------===//

/// The zero fill of `buffer` right before `op` (with no memory access in
/// between), if any.
linalg::FillOp zeroFillBefore(Operation *op, Value buffer) {
  for (Operation *prev = op->getPrevNode(); prev; prev = prev->getPrevNode()) {
    if (auto fill = dyn_cast<linalg::FillOp>(prev)) {
      if (fill.getOutputs()[0] != buffer)
        return nullptr;
      Attribute value;
      if (!matchPattern(fill.getInputs()[0], m_Constant(&value)))
        return nullptr;
      if (auto f = dyn_cast<FloatAttr>(value);
          f && f.getValue().isZero() && !f.getValue().isNegative())
        return fill;
      return nullptr;
    }
    if (!isMemoryEffectFree(prev))
      return nullptr;
  }
  return nullptr;
}

/// A view of `buffer` (read through `map`) with its dims in `order` (loop
/// dims), as memref.transpose.
Value permutedView(OpBuilder &b, Location loc, Value buffer, AffineMap map,
                   ArrayRef<unsigned> order) {
  SmallVector<unsigned> perm;
  for (unsigned loop : order)
    for (unsigned i = 0; i < map.getNumResults(); ++i)
      if (map.getDimPosition(i) == loop)
        perm.push_back(i);
  auto permMap = AffineMap::getPermutationMap(perm, b.getContext());
  if (permMap.isIdentity())
    return buffer;
  return memref::TransposeOp::create(b, loc, buffer,
                                     AffineMapAttr::get(permMap));
}

} // namespace

LogicalResult mlir::shardx::fuseTensorOps(ModuleOp module,
                                          int64_t maxOperandBytes,
                                          bool recomputeMath) {
  if (failed(generalizeForFusion(module)))
    return failure();
  MLIRContext *ctx = module.getContext();
  // Transposed GEMM results first: fusion would otherwise fold the transpose
  // into its consumer, which then reads the result with a stride.
  RewritePatternSet transposes(ctx);
  transposes.add<FoldTransposeOfResult>(ctx);
  if (failed(applyPatternsGreedily(module, std::move(transposes))))
    return module.emitError("folding transposes did not converge");
  RewritePatternSet patterns(ctx);
  linalg::populateElementwiseOpsFusionPatterns(
      patterns, [maxOperandBytes](OpOperand *operand) {
        return shouldFuse(operand, maxOperandBytes);
      });
  linalg::populateEraseUnusedOperandsAndResultsPatterns(patterns);
  linalg::GenericOp::getCanonicalizationPatterns(patterns, ctx);
  linalg::FillOp::getCanonicalizationPatterns(patterns, ctx);
  tensor::EmptyOp::getCanonicalizationPatterns(patterns, ctx);
  tensor::ExpandShapeOp::getCanonicalizationPatterns(patterns, ctx);
  tensor::CollapseShapeOp::getCanonicalizationPatterns(patterns, ctx);
  patterns.add<ElementwiseThroughReshapes<tensor::CollapseShapeOp>,
               ElementwiseThroughReshapes<tensor::ExpandShapeOp>,
               ExtractOfElementwise>(ctx);
  FrozenRewritePatternSet frozen(std::move(patterns));
  // Fusion makes new producers cheap to recompute (a widening fused into
  // the subtraction that reads it reads bf16), so copies and fusion
  // alternate until no copy is made (a few rounds: each round's copies
  // come from the last round's fusions).
  constexpr int kMaxRounds = 8;
  for (int round = 1;; ++round) {
    if (failed(applyPatternsGreedily(module, frozen)))
      return module.emitError("tensor fusion did not converge");
    if (round == kMaxRounds || !cloneCheapProducers(module, recomputeMath))
      break;
  }
  return success();
}

void mlir::shardx::splitSharedEmptyTensors(ModuleOp module) {
  // Each use of a single-result op in `ops` gets a clone right before its
  // user, and the op goes: a zero fill then comes right before the GEMM it
  // initializes, which shardx-contractions-to-blas folds into beta = 0,
  // whichever use came first.
  OpBuilder builder(module.getContext());
  auto cloneForEachUse = [&](ArrayRef<Operation *> ops) {
    for (Operation *op : ops) {
      for (OpOperand &use :
           llvm::make_early_inc_range(op->getResult(0).getUses())) {
        builder.setInsertionPoint(use.getOwner());
        use.set(builder.clone(*op)->getResult(0));
      }
      op->erase();
    }
  };
  // Fills of fresh tensors first (each clone's empty is split below).
  SmallVector<Operation *> fills, empties;
  module.walk([&](linalg::FillOp op) {
    if (op.hasPureTensorSemantics() && !op->use_empty() &&
        op.getOutputs()[0].getDefiningOp<tensor::EmptyOp>())
      fills.push_back(op);
  });
  cloneForEachUse(fills);
  module.walk([&](tensor::EmptyOp op) {
    if (!op->hasOneUse() && !op->use_empty())
      empties.push_back(op);
  });
  cloneForEachUse(empties);
}

void mlir::shardx::packSlicesAsConcat(ModuleOp module) {
  // The last insert_slice of each chain that fills a fresh 1-D tensor, in
  // order and exactly: the way shardx-bucket-collectives packs a bucket.
  SmallVector<tensor::InsertSliceOp> lasts;
  module.walk([&](tensor::InsertSliceOp op) {
    if (op.getResult().hasOneUse() &&
        isa<tensor::InsertSliceOp>(*op.getResult().getUsers().begin()))
      return; // not the end of its chain
    lasts.push_back(op);
  });
  OpBuilder b(module.getContext());
  for (tensor::InsertSliceOp last : lasts) {
    SmallVector<tensor::InsertSliceOp> chain;
    Value dest = last.getResult();
    while (auto insert = dest.getDefiningOp<tensor::InsertSliceOp>()) {
      if (insert != last && !insert.getResult().hasOneUse())
        break;
      chain.push_back(insert);
      dest = insert.getDest();
    }
    auto empty = dest.getDefiningOp<tensor::EmptyOp>();
    auto type = dyn_cast<RankedTensorType>(dest.getType());
    if (!empty || chain.size() < 2 || !type || type.getRank() != 1 ||
        !type.hasStaticShape())
      continue;
    std::reverse(chain.begin(), chain.end());
    int64_t at = 0;
    bool tiles = true;
    SmallVector<Value> pieces;
    for (tensor::InsertSliceOp insert : chain) {
      auto piece = dyn_cast<RankedTensorType>(insert.getSourceType());
      if (!piece || piece.getRank() != 1 || !piece.hasStaticShape() ||
          insert.getStaticOffsets()[0] != at ||
          insert.getStaticSizes()[0] != piece.getDimSize(0) ||
          insert.getStaticStrides()[0] != 1) {
        tiles = false;
        break;
      }
      at += piece.getDimSize(0);
      pieces.push_back(insert.getSource());
    }
    if (!tiles || at != type.getDimSize(0))
      continue;
    b.setInsertionPoint(last);
    auto concat = tensor::ConcatOp::create(b, last.getLoc(), type, 0, pieces);
    last.getResult().replaceAllUsesWith(concat.getResult());
    for (tensor::InsertSliceOp insert : llvm::reverse(chain))
      insert.erase();
    if (empty->use_empty())
      empty.erase();
  }
}

LogicalResult mlir::shardx::contractionsToBlasCalls(ModuleOp module) {
  return contractionsToGemmCalls(module, "shardx_rt_matmul_",
                                 "shardx_rt_batch_matmul_", {"f32", "f64"});
}

LogicalResult mlir::shardx::contractionsToGemmCalls(ModuleOp module,
                                                    StringRef gemm,
                                                    StringRef batchedGemm,
                                                    ArrayRef<StringRef> dtypes,
                                                    bool allowWidening) {
  auto suffix = [&](Type elt) -> std::optional<std::string> {
    std::optional<rt::DType> type = getRuntimeDType(elt);
    if (!type || !llvm::is_contained(dtypes, rt::stringifyDType(*type)))
      return std::nullopt;
    return std::string(rt::stringifyDType(*type));
  };
  MLIRContext *ctx = module.getContext();
  OpBuilder builder(ctx);
  SmallVector<std::pair<linalg::LinalgOp, linalg::ContractionDimensions>> ops;
  module.walk([&](linalg::LinalgOp op) {
    if (!op.hasPureBufferSemantics())
      return;
    if (!suffix(getElementTypeOrSelf(op->getOperand(0).getType())))
      return;
    if (std::optional<linalg::ContractionDimensions> dims =
            matchGemm(op, allowWidening))
      ops.emplace_back(op, *dims);
  });
  for (auto &[op, dims] : ops) {
    Type elt = getElementTypeOrSelf(op->getOperand(0).getType());
    Type out = getElementTypeOrSelf(op.getDpsInits()[0].getType());
    bool batched = !dims.batch.empty();
    int64_t rank = batched ? 3 : 2;
    // A widening GEMM (bf16/f16 operands, f32 result) is `<t>_f32`.
    std::string name = (batched ? batchedGemm : gemm).str() + *suffix(elt);
    if (out != elt)
      name += "_" + std::string(rt::stringifyDType(*getRuntimeDType(out)));
    SmallVector<int64_t> dyn(rank, ShapedType::kDynamic);
    auto layout = StridedLayoutAttr::get(ctx, ShapedType::kDynamic, dyn);
    auto argType = MemRefType::get(dyn, elt, layout);
    auto outType = MemRefType::get(dyn, out, layout);
    auto flagType = builder.getI32Type();
    auto fnType =
        builder.getFunctionType({argType, argType, outType, flagType}, {});
    auto callee = module.lookupSymbol<func::FuncOp>(name);
    if (!callee) {
      builder.setInsertionPointToStart(module.getBody());
      callee = func::FuncOp::create(builder, module.getLoc(), name, fnType);
      callee.setPrivate();
      callee->setAttr(LLVM::LLVMDialect::getEmitCWrapperAttrName(),
                      builder.getUnitAttr());
    }
    Location loc = op.getLoc();
    builder.setInsertionPoint(op);
    SmallVector<unsigned> batch(dims.batch.begin(), dims.batch.end());
    auto order = [&](unsigned r, unsigned c) {
      SmallVector<unsigned> o = batch;
      o.push_back(r);
      o.push_back(c);
      return o;
    };
    SmallVector<AffineMap> maps = op.getIndexingMapsArray();
    Value c = op.getDpsInits()[0];
    SmallVector<Value> args = {
        permutedView(builder, loc, op.getDpsInputs()[0], maps[0],
                     order(dims.m[0], dims.k[0])),
        permutedView(builder, loc, op.getDpsInputs()[1], maps[1],
                     order(dims.k[0], dims.n[0])),
        permutedView(builder, loc, c, maps[2], order(dims.m[0], dims.n[0]))};
    args[0] = memref::CastOp::create(builder, loc, argType, args[0]);
    args[1] = memref::CastOp::create(builder, loc, argType, args[1]);
    args[2] = memref::CastOp::create(builder, loc, outType, args[2]);
    linalg::FillOp fill = zeroFillBefore(op, c);
    args.push_back(
        arith::ConstantIntOp::create(builder, loc, flagType, fill ? 0 : 1));
    func::CallOp::create(builder, loc, callee, args);
    LLVM_DEBUG(llvm::dbgs() << "BLAS call for " << *op
                            << (fill ? " (beta = 0)" : "") << "\n");
    op->erase();
    if (fill)
      fill->erase();
  }
  return success();
}

namespace mlir::shardx {
#define GEN_PASS_DEF_FUSETENSOROPSPASS
#define GEN_PASS_DEF_SPLITSHAREDEMPTYTENSORSPASS
#define GEN_PASS_DEF_PACKSLICESASCONCATPASS
#define GEN_PASS_DEF_CONTRACTIONSTOBLASPASS
#include "shardx/Compiler/Passes.h.inc"
} // namespace mlir::shardx

namespace {

struct FuseTensorOpsPass
    : mlir::shardx::impl::FuseTensorOpsPassBase<FuseTensorOpsPass> {
  using FuseTensorOpsPassBase::FuseTensorOpsPassBase;
  void runOnOperation() override {
    if (failed(mlir::shardx::fuseTensorOps(getOperation(), maxOperandBytes,
                                           recomputeMath)))
      signalPassFailure();
  }
};

struct SplitSharedEmptyTensorsPass
    : mlir::shardx::impl::SplitSharedEmptyTensorsPassBase<
          SplitSharedEmptyTensorsPass> {
  void runOnOperation() override {
    mlir::shardx::splitSharedEmptyTensors(getOperation());
  }
};

struct PackSlicesAsConcatPass
    : mlir::shardx::impl::PackSlicesAsConcatPassBase<PackSlicesAsConcatPass> {
  void runOnOperation() override {
    mlir::shardx::packSlicesAsConcat(getOperation());
  }
};

struct ContractionsToBlasPass
    : mlir::shardx::impl::ContractionsToBlasPassBase<ContractionsToBlasPass> {
  void runOnOperation() override {
    if (failed(mlir::shardx::contractionsToBlasCalls(getOperation())))
      signalPassFailure();
  }
};

} // namespace
