//===- DecomposeForCodegen.cpp - Ops without a code generation path -------===//
//
// Part of ShardX.
//
// The dialects a ShardX program may use have ops that one-shot
// bufferization or the lowering to LLVM has no path for: `tensor.gather`,
// `tensor.scatter` and `tensor.bitcast` have no bufferization model,
// `linalg.pack` / `linalg.unpack` none either, and `linalg.softmax` reaches
// the LLVM translation whole. The verifier accepts them and the planner
// replicates them (no sharding rule), so before this pass such a program
// failed in code generation ("op was not bufferized"). Each one becomes
// ops that compile, before the fusion and bufferization passes:
//
//   %r = tensor.gather %src[%idx] gather_dims([0]) :
//          (tensor<8x4xf32>, tensor<3x1xi32>) -> tensor<3x1x4xf32>
// becomes
//   %r = linalg.generic outs(tensor.empty() : tensor<3x1x4xf32>) {
//     %i = index_cast %idx[linalg.index 0, 0]
//     %ok = 0 <= %i < 8
//     %x = tensor.extract %src[select(%ok, %i, 0), linalg.index 2]
//     linalg.yield select(%ok, %x, 0.0) }
//
// An index outside the source (undefined behaviour for the op) reads 0, and
// a scatter coordinate outside the destination writes nothing: the code
// never touches memory outside a buffer, whatever the indices.
//
//===----------------------------------------------------------------------===//

#include "DecomposeAttention.h"

#include "shardx/Compiler/Passes.h"
#include "shardx/Dialect/ShardX/IR/ShardX.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/Pass.h"

namespace mlir::shardx {
#define GEN_PASS_DEF_DECOMPOSEFORCODEGENPASS
#include "shardx/Compiler/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;

namespace {

/// Coordinate `d` of the index tuple at `batch` in `indices` (its last dim
/// holds the tuple) as an index, with whether it lies in [0, size) and the
/// coordinate itself where it does, 0 where not.
struct Coordinate {
  Value inRange;
  Value clamped;
};

Coordinate readCoordinate(OpBuilder &b, Location loc, Value indices,
                          ValueRange batch, int64_t d, int64_t size) {
  SmallVector<Value> at(batch);
  at.push_back(arith::ConstantIndexOp::create(b, loc, d));
  Value raw = tensor::ExtractOp::create(b, loc, indices, at);
  Value i = raw;
  if (!raw.getType().isIndex())
    i = arith::IndexCastOp::create(b, loc, b.getIndexType(), raw);
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value bound = arith::ConstantIndexOp::create(b, loc, size);
  Value low = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, i, zero);
  Value high =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, i, bound);
  Value ok = arith::AndIOp::create(b, loc, low, high);
  return {ok, arith::SelectOp::create(b, loc, ok, i, zero)};
}

Value allOf(OpBuilder &b, Location loc, ArrayRef<Value> conditions) {
  Value all = arith::ConstantIntOp::create(b, loc, b.getI1Type(), 1);
  for (Value c : conditions)
    all = arith::AndIOp::create(b, loc, all, c);
  return all;
}

LogicalResult lowerGather(RewriterBase &rewriter, tensor::GatherOp op) {
  RankedTensorType source = op.getSourceType();
  RankedTensorType result = op.getResultType();
  auto indicesType = cast<RankedTensorType>(op.getIndices().getType());
  int64_t batchRank = indicesType.getRank() - 1;
  bool rankReduced = result.getRank() != batchRank + source.getRank();
  ArrayRef<int64_t> gatherDims = op.getGatherDims();
  Location loc = op.getLoc();
  Value init = tensor::EmptyOp::create(rewriter, loc, result.getShape(),
                                       result.getElementType());
  SmallVector<AffineMap> maps{
      rewriter.getMultiDimIdentityMap(result.getRank())};
  SmallVector<utils::IteratorType> iterators(result.getRank(),
                                             utils::IteratorType::parallel);
  auto generic = linalg::GenericOp::create(
      rewriter, loc, result, ValueRange{}, ValueRange{init}, maps, iterators,
      [&](OpBuilder &b, Location loc, ValueRange) {
        SmallVector<Value> at;
        for (int64_t i = 0, e = result.getRank(); i < e; ++i)
          at.push_back(linalg::IndexOp::create(b, loc, i));
        ValueRange batch = ValueRange(at).take_front(batchRank);
        SmallVector<Value> coords, inRange;
        int64_t trailing = batchRank;
        for (int64_t d = 0, e = source.getRank(); d < e; ++d) {
          const auto *it = llvm::find(gatherDims, d);
          if (it == gatherDims.end()) {
            coords.push_back(at[trailing++]);
            continue;
          }
          Coordinate c =
              readCoordinate(b, loc, op.getIndices(), batch,
                             it - gatherDims.begin(), source.getDimSize(d));
          coords.push_back(c.clamped);
          inRange.push_back(c.inRange);
          if (!rankReduced)
            ++trailing;
        }
        Value x = tensor::ExtractOp::create(b, loc, op.getSource(), coords);
        Value zero = arith::ConstantOp::create(
            b, loc, b.getZeroAttr(result.getElementType()));
        Value y =
            arith::SelectOp::create(b, loc, allOf(b, loc, inRange), x, zero);
        linalg::YieldOp::create(b, loc, y);
      });
  rewriter.replaceOp(op, generic.getResults());
  return success();
}

LogicalResult lowerScatter(RewriterBase &rewriter, tensor::ScatterOp op) {
  RankedTensorType source = op.getSourceType();
  RankedTensorType dest = op.getDestType();
  auto indicesType = cast<RankedTensorType>(op.getIndices().getType());
  int64_t batchRank = indicesType.getRank() - 1;
  ArrayRef<int64_t> scatterDims = op.getScatterDims();
  Location loc = op.getLoc();
  // One slice of the source per index tuple: its trailing dims.
  auto sliceType = RankedTensorType::get(
      source.getShape().drop_front(batchRank), source.getElementType());
  auto insert = [&](OpBuilder &b, Location loc, ValueRange batch,
                    Value into) -> Value {
    SmallVector<OpFoldResult> offsets(batch.begin(), batch.end());
    SmallVector<OpFoldResult> sizes(batchRank, b.getIndexAttr(1));
    for (int64_t s : sliceType.getShape()) {
      offsets.push_back(b.getIndexAttr(0));
      sizes.push_back(b.getIndexAttr(s));
    }
    SmallVector<OpFoldResult> strides(source.getRank(), b.getIndexAttr(1));
    Value slice = tensor::ExtractSliceOp::create(
        b, loc, sliceType, op.getSource(), offsets, sizes, strides);
    SmallVector<OpFoldResult> at, extent;
    SmallVector<Value> inRange;
    for (int64_t d = 0, e = dest.getRank(); d < e; ++d) {
      const auto *it = llvm::find(scatterDims, d);
      if (it == scatterDims.end()) {
        at.push_back(b.getIndexAttr(0));
        extent.push_back(b.getIndexAttr(dest.getDimSize(d)));
        continue;
      }
      Coordinate c =
          readCoordinate(b, loc, op.getIndices(), batch,
                         it - scatterDims.begin(), dest.getDimSize(d));
      at.push_back(c.clamped);
      extent.push_back(b.getIndexAttr(1));
      inRange.push_back(c.inRange);
    }
    SmallVector<OpFoldResult> ones(dest.getRank(), b.getIndexAttr(1));
    auto guarded = scf::IfOp::create(
        b, loc, allOf(b, loc, inRange),
        [&](OpBuilder &b, Location loc) {
          Value written = tensor::InsertSliceOp::create(b, loc, slice, into, at,
                                                        extent, ones);
          scf::YieldOp::create(b, loc, written);
        },
        [&](OpBuilder &b, Location loc) {
          scf::YieldOp::create(b, loc, into);
        });
    return guarded.getResult(0);
  };
  Value written;
  if (batchRank == 0) {
    written = insert(rewriter, loc, ValueRange{}, op.getDest());
  } else {
    SmallVector<Value> lbs, ubs, steps;
    Value zero = arith::ConstantIndexOp::create(rewriter, loc, 0);
    Value one = arith::ConstantIndexOp::create(rewriter, loc, 1);
    for (int64_t s : indicesType.getShape().drop_back()) {
      lbs.push_back(zero);
      ubs.push_back(arith::ConstantIndexOp::create(rewriter, loc, s));
      steps.push_back(one);
    }
    scf::LoopNest nest = scf::buildLoopNest(
        rewriter, loc, lbs, ubs, steps, ValueRange{op.getDest()},
        [&](OpBuilder &b, Location loc, ValueRange ivs,
            ValueRange args) -> scf::ValueVector {
          return {insert(b, loc, ivs, args.front())};
        });
    written = nest.results.front();
  }
  rewriter.replaceOp(op, written);
  return success();
}

/// `tensor.scatter` as a `linalg.generic` over the destination (parallel)
/// and the indices' batch dims (reduction): each element takes the source
/// element whose coordinates match it, or keeps its value. The op's
/// `unique` makes at most one match; a coordinate out of range matches
/// nothing.
LogicalResult lowerScatterMasked(RewriterBase &rewriter, tensor::ScatterOp op) {
  RankedTensorType source = op.getSourceType();
  RankedTensorType dest = op.getDestType();
  auto indicesType = cast<RankedTensorType>(op.getIndices().getType());
  int64_t batchRank = indicesType.getRank() - 1;
  int64_t destRank = dest.getRank();
  bool rankReduced = source.getRank() != batchRank + destRank;
  ArrayRef<int64_t> scatterDims = op.getScatterDims();
  Location loc = op.getLoc();
  MLIRContext *context = op.getContext();
  int64_t loops = destRank + batchRank;
  AffineMap toDest = AffineMap::getMultiDimIdentityMap(loops, context)
                         .getMajorSubMap(destRank);
  // The source element of an (element, batch) point: the batch coords,
  // then the element's coords but the scattered dims (0 where kept).
  SmallVector<AffineExpr> fromSource;
  for (int64_t i = 0; i < batchRank; ++i)
    fromSource.push_back(getAffineDimExpr(destRank + i, context));
  for (int64_t d = 0; d < destRank; ++d) {
    if (!llvm::is_contained(scatterDims, d))
      fromSource.push_back(getAffineDimExpr(d, context));
    else if (!rankReduced)
      fromSource.push_back(getAffineConstantExpr(0, context));
  }
  AffineMap toSource = AffineMap::get(loops, 0, fromSource, context);
  SmallVector<utils::IteratorType> iterators(destRank,
                                             utils::IteratorType::parallel);
  iterators.append(batchRank, utils::IteratorType::reduction);
  auto generic = linalg::GenericOp::create(
      rewriter, loc, dest, ValueRange{op.getSource()}, ValueRange{op.getDest()},
      SmallVector<AffineMap>{toSource, toDest}, iterators,
      [&](OpBuilder &b, Location loc, ValueRange args) {
        SmallVector<Value> at;
        for (int64_t i = 0; i < loops; ++i)
          at.push_back(linalg::IndexOp::create(b, loc, i));
        ValueRange element = ValueRange(at).take_front(destRank);
        ValueRange batch = ValueRange(at).drop_front(destRank);
        SmallVector<Value> hits;
        for (auto [j, d] : llvm::enumerate(scatterDims)) {
          Coordinate c = readCoordinate(b, loc, op.getIndices(), batch, j,
                                        dest.getDimSize(d));
          hits.push_back(arith::AndIOp::create(
              b, loc, c.inRange,
              arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, c.clamped,
                                    element[d])));
        }
        Value y = arith::SelectOp::create(b, loc, allOf(b, loc, hits), args[0],
                                          args[1]);
        linalg::YieldOp::create(b, loc, y);
      });
  rewriter.replaceOp(op, generic.getResults());
  return success();
}

LogicalResult lowerBitcast(RewriterBase &rewriter, tensor::BitcastOp op) {
  auto from = cast<RankedTensorType>(op.getSource().getType());
  auto to = cast<RankedTensorType>(op.getType());
  Location loc = op.getLoc();
  Value init = tensor::EmptyOp::create(rewriter, loc, to.getShape(),
                                       to.getElementType());
  AffineMap identity = rewriter.getMultiDimIdentityMap(from.getRank());
  SmallVector<utils::IteratorType> iterators(from.getRank(),
                                             utils::IteratorType::parallel);
  auto generic = linalg::GenericOp::create(
      rewriter, loc, to, ValueRange{op.getSource()}, ValueRange{init},
      SmallVector<AffineMap>{identity, identity}, iterators,
      [&](OpBuilder &b, Location loc, ValueRange args) {
        Value y =
            arith::BitcastOp::create(b, loc, to.getElementType(), args.front());
        linalg::YieldOp::create(b, loc, y);
      });
  rewriter.replaceOp(op, generic.getResults());
  return success();
}

//===----------------------------------------------------------------------===//
// Attention as calls of the cuda runtime's fused kernels
//===----------------------------------------------------------------------===//

/// The suffix of the fused kernel that computes `op` (`bf16`, `f16`), or
/// none where the op is not one the kernels take: `products` given, f32
/// tensors, a static head width of 32, 64 or 128 for the queries, keys and
/// values alike, i64 positions.
std::optional<StringRef> attentionKernelSuffix(Operation *op) {
  auto products = op->getAttrOfType<TypeAttr>("products");
  if (!products)
    return std::nullopt;
  auto q = cast<RankedTensorType>(op->getOperand(0).getType());
  auto v = cast<RankedTensorType>(op->getOperand(2).getType());
  int64_t width = q.getDimSize(3);
  if (!q.getElementType().isF32() || v.getDimSize(3) != width ||
      (width != 32 && width != 64 && width != 128))
    return std::nullopt;
  unsigned positions = isa<mlir::shardx::AttentionOp>(op) ? 3 : 6;
  if (op->getNumOperands() > positions &&
      !cast<RankedTensorType>(op->getOperand(positions).getType())
           .getElementType()
           .isInteger(64))
    return std::nullopt;
  return products.getValue().isBF16() ? StringRef("bf16") : StringRef("f16");
}

/// Builds one call of a fused attention kernel at the op's position.
struct AttentionCall {
  RewriterBase &b;
  Location loc;
  SmallVector<Value> args;

  /// `m` (identity layout) as a 1-D memref of dynamic size and offset.
  Value flat(Value m) {
    auto type = cast<MemRefType>(m.getType());
    ReassociationIndices all;
    for (int64_t i = 0; i < type.getRank(); ++i)
      all.push_back(i);
    Value one = memref::CollapseShapeOp::create(
        b, loc, m, ArrayRef<ReassociationIndices>{all});
    auto dyn1D = MemRefType::get(
        {ShapedType::kDynamic}, type.getElementType(),
        StridedLayoutAttr::get(b.getContext(), ShapedType::kDynamic,
                               {ShapedType::kDynamic}));
    return memref::CastOp::create(b, loc, dyn1D, one);
  }
  /// `t`'s buffer, contiguous (bufferization copies a strided one), read by
  /// the call.
  void read(Value t) {
    auto type = cast<RankedTensorType>(t.getType());
    args.push_back(flat(bufferization::ToBufferOp::create(
        b, loc, MemRefType::get(type.getShape(), type.getElementType()), t,
        /*readOnly=*/true)));
  }
  /// A fresh buffer of type `type` that the call writes, its dynamic dims
  /// those of `source` (whose leading dims are the result's).
  Value written(Type type, Value source) {
    auto tensor = cast<RankedTensorType>(type);
    SmallVector<Value> dynamic;
    for (int64_t d = 0; d < tensor.getRank(); ++d)
      if (tensor.isDynamicDim(d))
        dynamic.push_back(tensor::DimOp::create(b, loc, source, d));
    Value buffer = memref::AllocOp::create(
        b, loc, MemRefType::get(tensor.getShape(), tensor.getElementType()),
        dynamic);
    args.push_back(flat(buffer));
    return buffer;
  }
};

/// Replaces `op`, an attention op that attentionKernelSuffix takes, by a
/// call of `shardx_rt_cuda_attention[_dq|_dkv]_<suffix>` (the ABI of
/// lib/Runtime/cuda/Attention.cpp): the inputs' buffers, the positions (a
/// one-element dummy when not causal), the outputs' fresh buffers, then
/// batch, heads, key/value heads, queries, keys, width (i64), causal (i32)
/// and scale (f64).
LogicalResult callAttentionKernel(RewriterBase &rewriter, Operation *op,
                                  StringRef suffix) {
  rewriter.setInsertionPoint(op);
  Location loc = op->getLoc();
  AttentionCall call{rewriter, loc, {}};
  bool forward = isa<mlir::shardx::AttentionOp>(op);
  unsigned inputs = forward ? 3 : 6;
  Value q = op->getOperand(0), k = op->getOperand(1), v = op->getOperand(2);
  bool causal = op->getNumOperands() > inputs;
  Value qpos, kpos;
  if (causal) {
    qpos = op->getOperand(inputs);
    kpos = op->getOperand(inputs + 1);
  } else {
    auto type = RankedTensorType::get({1}, rewriter.getI64Type());
    qpos = kpos = arith::ConstantOp::create(
        rewriter, loc, DenseIntElementsAttr::get(type, ArrayRef<int64_t>{0}));
  }
  // Sizes first: the buffers' views are taken right before the call.
  SmallVector<Value> sizes;
  for (auto [t, d] : {std::pair{q, 0}, {q, 1}, {k, 1}, {q, 2}, {k, 2}}) {
    Value size = tensor::DimOp::create(rewriter, loc, t, d);
    sizes.push_back(
        arith::IndexCastOp::create(rewriter, loc, rewriter.getI64Type(), size)
            .getResult());
  }
  sizes.push_back(arith::ConstantIntOp::create(
      rewriter, loc, cast<RankedTensorType>(q.getType()).getDimSize(3), 64));
  for (unsigned i = 0; i < inputs; ++i)
    call.read(op->getOperand(i));
  call.read(qpos);
  call.read(kpos);
  SmallVector<Value> buffers;
  for (Value result : op->getResults()) {
    // out, lse and dq have q's leading dims; dk k's, dv v's.
    Value source = q;
    if (isa<mlir::shardx::AttentionDkvOp>(op))
      source = result == op->getResult(0) ? k : v;
    buffers.push_back(call.written(result.getType(), source));
  }
  call.args.append(sizes);
  call.args.push_back(arith::ConstantIntOp::create(rewriter, loc, causal, 32));
  call.args.push_back(arith::ConstantOp::create(
      rewriter, loc,
      rewriter.getF64FloatAttr(
          op->getAttrOfType<FloatAttr>("scale").getValueAsDouble())));
  StringRef pass = forward                                ? ""
                   : isa<mlir::shardx::AttentionDqOp>(op) ? "_dq"
                                                          : "_dkv";
  std::string name = ("shardx_rt_cuda_attention" + pass + "_" + suffix).str();
  auto module = op->getParentOfType<ModuleOp>();
  auto fn = module.lookupSymbol<func::FuncOp>(name);
  if (!fn) {
    OpBuilder::InsertionGuard guard(rewriter);
    rewriter.setInsertionPointToStart(module.getBody());
    fn = func::FuncOp::create(
        rewriter, module.getLoc(), name,
        rewriter.getFunctionType(ValueRange(call.args).getTypes(), {}));
    fn.setPrivate();
    fn->setAttr(LLVM::LLVMDialect::getEmitCWrapperAttrName(),
                rewriter.getUnitAttr());
  }
  func::CallOp::create(rewriter, loc, fn, call.args);
  SmallVector<Value> results;
  for (auto [result, buffer] : llvm::zip(op->getResults(), buffers))
    results.push_back(bufferization::ToTensorOp::create(
        rewriter, loc, result.getType(), buffer, /*restrict=*/true,
        /*writable=*/true));
  rewriter.replaceOp(op, results);
  return success();
}

LogicalResult decompose(RewriterBase &rewriter, Operation *op,
                        bool scatterLoops, int64_t attentionBlockBytes) {
  // The attention ops take the sizes of their tensors' dims, dynamic ones
  // included (a rank's piece of an uneven split).
  if (mlir::shardx::isShardXComputation(op))
    return mlir::shardx::decomposeAttention(rewriter, op,
                                            attentionBlockBytes);
  // The rewrites build static shapes (entry points have them, and so, after
  // the SPMD pipeline, does every value of a program).
  auto dynamic = [](Type t) {
    auto tensor = dyn_cast<TensorType>(t);
    return tensor && !tensor.hasStaticShape();
  };
  if (llvm::any_of(op->getOperandTypes(), dynamic) ||
      llvm::any_of(op->getResultTypes(), dynamic))
    return op->emitOpError("with a dynamic shape is not supported by code "
                           "generation");
  rewriter.setInsertionPoint(op);
  if (auto gather = dyn_cast<tensor::GatherOp>(op))
    return lowerGather(rewriter, gather);
  if (auto scatter = dyn_cast<tensor::ScatterOp>(op))
    return scatterLoops ? lowerScatter(rewriter, scatter)
                        : lowerScatterMasked(rewriter, scatter);
  if (auto bitcast = dyn_cast<tensor::BitcastOp>(op))
    return lowerBitcast(rewriter, bitcast);
  if (auto pack = dyn_cast<linalg::PackOp>(op)) {
    if (failed(linalg::lowerPack(rewriter, pack)))
      return op->emitOpError("could not be lowered for code generation");
    return success();
  }
  if (auto unpack = dyn_cast<linalg::UnPackOp>(op)) {
    if (failed(linalg::lowerUnPack(rewriter, unpack)))
      return op->emitOpError("could not be lowered for code generation");
    return success();
  }
  if (auto aggregated = dyn_cast<linalg::AggregatedOpInterface>(op)) {
    FailureOr<SmallVector<Value>> values =
        aggregated.decomposeOperation(rewriter);
    if (failed(values))
      return op->emitOpError("could not be decomposed for code generation");
    rewriter.replaceOp(op, *values);
    return success();
  }
  return success();
}

struct DecomposeForCodegenPass
    : mlir::shardx::impl::DecomposeForCodegenPassBase<DecomposeForCodegenPass> {
  using DecomposeForCodegenPassBase::DecomposeForCodegenPassBase;

  void runOnOperation() override {
    SmallVector<Operation *> ops;
    getOperation()->walk([&](Operation *op) {
      if (isa<tensor::GatherOp, tensor::ScatterOp, tensor::BitcastOp,
              linalg::PackOp, linalg::UnPackOp, linalg::AggregatedOpInterface>(
              op) ||
          mlir::shardx::isShardXComputation(op))
        ops.push_back(op);
    });
    IRRewriter rewriter(&getContext());
    // A decomposition's ops are ones code generation handles, so one pass
    // over the program's ops is enough. The two backward ops of one
    // attention are written together, at the first (DecomposeAttention.h).
    llvm::DenseSet<Operation *> done;
    for (Operation *op : ops) {
      if (done.contains(op))
        continue;
      if (attentionKernels && mlir::shardx::isShardXComputation(op)) {
        if (std::optional<StringRef> suffix = attentionKernelSuffix(op)) {
          if (failed(callAttentionKernel(rewriter, op, *suffix)))
            return signalPassFailure();
          continue;
        }
      }
      Operation *partner = mlir::shardx::findAttentionPartner(op);
      if (partner) {
        if (partner->isBeforeInBlock(op))
          std::swap(op, partner);
        done.insert(partner);
        if (failed(mlir::shardx::decomposeAttention(rewriter, op,
                                                    attentionBlockBytes,
                                                    partner)))
          return signalPassFailure();
        continue;
      }
      if (failed(decompose(rewriter, op, scatterLoops, attentionBlockBytes)))
        return signalPassFailure();
    }
  }
};

} // namespace
