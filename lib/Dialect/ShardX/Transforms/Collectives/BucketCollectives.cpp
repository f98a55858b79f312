//===- BucketCollectives.cpp - Merge small all-reduces into buckets -------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// Gradient bucketing, as PyTorch DDP does it, decided by the alpha-beta cost
// model: all-reduces that can wait for each other are packed into one flat
// buffer and reduced by one collective. Each block is scanned in order; an
// open bucket per (mesh, axes, reduction, element type) collects the
// all-reduces seen so far and is emitted right before the first op that
// reads a member's result (every member's operand is defined by then).
//
//===----------------------------------------------------------------------===//

#include "shardx/Dialect/ShardX/IR/LibraryNames.h"
#include "shardx/Dialect/ShardX/Transforms/ReshardPlanning.h"

#include "shardx/Dialect/ShardX/Transforms/Passes.h"

#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include "llvm/ADT/MapVector.h"

namespace mlir::shardx {
#define GEN_PASS_DEF_BUCKETCOLLECTIVESPASS
#include "shardx/Dialect/ShardX/Transforms/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;
using namespace mlir::shardx;

namespace {

/// What all-reduces must share to be reduced together.
using BucketKey = std::tuple<Attribute, Attribute, Attribute, Type>;

struct Bucket {
  SmallVector<AllReduceOp> members;
  int64_t bytes = 0;
  /// The latency of one collective over the bucket's axes (microseconds).
  double latencyUs = 0;
};

/// The bytes of a tensor as the runtime stores it (sub-byte types, i1 and
/// i4, take one byte per element there).
int64_t byteSize(RankedTensorType type) {
  return type.getNumElements() *
         std::max<int64_t>(1, type.getElementTypeBitWidth() / 8);
}

/// `value` viewed as `type`, where one of the two is 1-D and both have the
/// same number of elements: an expand or collapse of all dims (none for a
/// 0-d tensor).
Value reshapeFlat(OpBuilder &b, Location loc, Value value,
                  RankedTensorType type) {
  auto from = cast<RankedTensorType>(value.getType());
  if (from == type)
    return value;
  int64_t high = std::max(from.getRank(), type.getRank());
  SmallVector<ReassociationIndices> reassociation;
  if (std::min(from.getRank(), type.getRank()) == 1)
    reassociation.push_back(llvm::to_vector(llvm::seq<int64_t>(0, high)));
  if (type.getRank() > from.getRank())
    return tensor::ExpandShapeOp::create(b, loc, type, value, reassociation);
  return tensor::CollapseShapeOp::create(b, loc, type, value, reassociation);
}

/// `value` as a 1-D tensor.
Value flatten(OpBuilder &b, Location loc, Value value) {
  auto type = cast<RankedTensorType>(value.getType());
  return reshapeFlat(
      b, loc, value,
      RankedTensorType::get({type.getNumElements()}, type.getElementType()));
}

struct BucketCollectivesPass
    : public mlir::shardx::impl::BucketCollectivesPassBase<
          BucketCollectivesPass> {
  using BucketCollectivesPassBase::BucketCollectivesPassBase;

  void runOnOperation() override {
    formedBucket = false; // a pass instance may run more than once
    SymbolTableCollection symbolTable;
    SmallVector<Block *> blocks;
    getOperation()->walk([&](Block *block) { blocks.push_back(block); });
    for (Block *block : blocks)
      runOnBlock(*block, symbolTable);
    // Without a bucket the IR is unchanged: no verifier run after the pass.
    if (!formedBucket)
      markAllAnalysesPreserved();
  }

  bool formedBucket = false;

  /// The latency of one collective step over the group of `op`, in
  /// microseconds (the alpha of the mesh model's group cost).
  double latencyUs(AllReduceOp op, SymbolTableCollection &symbolTable) {
    MeshOp mesh = lookupMesh(op, op.getMeshAttr(), &symbolTable);
    if (!mesh)
      return 0;
    MeshSpec spec = getMeshSpec(mesh);
    if (!spec.hasAxes(op.getAxes()))
      return 0;
    return spec.groupCost(op.getAxes()).latencyUs;
  }

  /// Whether `op` may join a bucket: a static shape, and packing it (one
  /// copy in, one out) costs less than `latency`, the latency of one
  /// collective over its axes.
  bool worthBucketing(AllReduceOp op, double latency) {
    auto type = dyn_cast<RankedTensorType>(op.getType());
    if (!type || !type.hasStaticShape() || type.getEncoding() ||
        !type.getElementType().isIntOrFloat())
      return false;
    return byteSize(type) <= maxBucketBytes && copyUs(type) < latency;
  }

  /// The time of copying a member into the packed buffer and out again.
  double copyUs(RankedTensorType type) {
    return 2.0 * byteSize(type) / (copyBandwidthGBps * 1e3);
  }

  /// Drops the largest members until the bucket pays for itself: k members
  /// save k - 1 latencies and cost k copies in and out.
  void prune(Bucket &bucket) {
    auto copyOf = [&](AllReduceOp m) {
      return copyUs(cast<RankedTensorType>(m.getType()));
    };
    double copies = 0;
    for (AllReduceOp m : bucket.members)
      copies += copyOf(m);
    while (bucket.members.size() > 1 &&
           copies >= (bucket.members.size() - 1) * bucket.latencyUs) {
      auto largest =
          llvm::max_element(bucket.members, [&](AllReduceOp a, AllReduceOp b) {
            return copyOf(a) < copyOf(b);
          });
      copies -= copyOf(*largest);
      bucket.bytes -= byteSize(cast<RankedTensorType>(largest->getType()));
      bucket.members.erase(largest);
    }
  }

  void runOnBlock(Block &block, SymbolTableCollection &symbolTable) {
    llvm::MapVector<BucketKey, Bucket> open;
    DenseMap<Value, BucketKey> memberOf;
    auto flush = [&](const BucketKey &key, Operation *before) {
      Bucket bucket = std::move(open[key]);
      open.erase(key);
      for (AllReduceOp m : bucket.members)
        memberOf.erase(m.getResult());
      prune(bucket);
      if (bucket.members.size() > 1)
        emit(bucket, before);
    };
    for (Operation &op : llvm::make_early_inc_range(block)) {
      // Buckets whose results `op` reads are emitted before it.
      SmallVector<BucketKey> ready;
      auto check = [&](Value v) {
        auto it = memberOf.find(v);
        if (it != memberOf.end() && !llvm::is_contained(ready, it->second))
          ready.push_back(it->second);
      };
      op.walk([&](Operation *inner) {
        for (Value v : inner->getOperands())
          check(v);
      });
      for (const BucketKey &key : ready)
        flush(key, &op);
      auto allReduce = dyn_cast<AllReduceOp>(op);
      if (!allReduce)
        continue;
      double latency = latencyUs(allReduce, symbolTable);
      if (!worthBucketing(allReduce, latency))
        continue;
      auto type = cast<RankedTensorType>(allReduce.getType());
      BucketKey key{allReduce.getMeshAttr(), allReduce.getAxesAttr(),
                    allReduce.getReductionAttr(), type.getElementType()};
      if (auto it = open.find(key);
          it != open.end() &&
          it->second.bytes + byteSize(type) > maxBucketBytes)
        flush(key, &op);
      Bucket &bucket = open[key];
      bucket.latencyUs = latency; // the same for every member (same key)
      bucket.members.push_back(allReduce);
      bucket.bytes += byteSize(type);
      memberOf[allReduce.getResult()] = key;
    }
    // Results that are never read (all uses erased): nothing forces the
    // bucket, it is emitted at the end of the block.
    SmallVector<BucketKey> keys;
    for (auto &entry : open)
      keys.push_back(entry.first);
    for (const BucketKey &key : keys)
      flush(key, block.mightHaveTerminator() ? block.getTerminator() : nullptr);
  }

  void emit(Bucket &bucket, Operation *before) {
    formedBucket = true;
    AllReduceOp first = bucket.members.front();
    Location firstLoc = first.getLoc();
    SmallVector<Location> locs;
    for (AllReduceOp m : bucket.members)
      locs.push_back(m.getLoc());
    Location loc = FusedLoc::get(&getContext(), locs);
    OpBuilder b(&getContext());
    if (before)
      b.setInsertionPoint(before);
    else
      b.setInsertionPointToEnd(first->getBlock());
    Type elementType = cast<RankedTensorType>(first.getType()).getElementType();
    int64_t total = 0;
    for (AllReduceOp m : bucket.members)
      total += cast<RankedTensorType>(m.getType()).getNumElements();
    auto packedType = RankedTensorType::get({total}, elementType);
    Value packed =
        tensor::EmptyOp::create(b, loc, packedType.getShape(), elementType);
    int64_t offset = 0;
    SmallVector<int64_t> offsets;
    for (AllReduceOp m : bucket.members) {
      Value flat = flatten(b, m.getLoc(), m.getInput());
      int64_t size = cast<RankedTensorType>(m.getType()).getNumElements();
      packed = tensor::InsertSliceOp::create(
          b, m.getLoc(), flat, packed,
          ArrayRef<OpFoldResult>{b.getIndexAttr(offset)},
          ArrayRef<OpFoldResult>{b.getIndexAttr(size)},
          ArrayRef<OpFoldResult>{b.getIndexAttr(1)});
      offsets.push_back(offset);
      offset += size;
    }
    Value reduced =
        AllReduceOp::create(b, loc, packedType, packed, first.getMeshAttr(),
                            first.getAxesAttr(), first.getReductionAttr());
    for (auto [m, off] : llvm::zip(bucket.members, offsets)) {
      auto type = cast<RankedTensorType>(m.getType());
      auto flatType =
          RankedTensorType::get({type.getNumElements()}, elementType);
      Value slice = tensor::ExtractSliceOp::create(
          b, m.getLoc(), flatType, reduced,
          ArrayRef<OpFoldResult>{b.getIndexAttr(off)},
          ArrayRef<OpFoldResult>{b.getIndexAttr(type.getNumElements())},
          ArrayRef<OpFoldResult>{b.getIndexAttr(1)});
      m.getResult().replaceAllUsesWith(reshapeFlat(b, m.getLoc(), slice, type));
      m.erase();
    }
    if (printBuckets)
      emitRemark(firstLoc) << "bucket of " << bucket.members.size()
                           << " all-reduces, " << bucket.bytes << " bytes";
  }
};

} // namespace
