//===- RuntimeCalls.h - Building shardx_rt_cg_* calls -----------*- C++ -*-===//
//
// Part of ShardX.
//
// The IR-building helpers the ShardXToRuntime patterns share: flat runtime
// collective calls on tensors, the rank's group index, and the reshapes and
// transposes that bring a dim, stride or group order into the flat layout
// the runtime moves.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_CONVERSION_SHARDXTORUNTIME_RUNTIMECALLS_H
#define SHARDX_LIB_CONVERSION_SHARDXTORUNTIME_RUNTIMECALLS_H

#include "shardx/Dialect/ShardX/IR/ShardX.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

namespace mlir::shardx {

/// The runtime C ABI's code of a reduction (SHARDX_RT_SUM, ...): the same
/// numbering as ReductionKind and ReduceOp (static_asserts in ShardXAttrs.cpp
/// and CApi.cpp).
int32_t getRuntimeReductionCode(ReductionKind kind);

/// Builds runtime calls and the layout changes around them in front of
/// `op`, with `builder` (a pattern's rewriter). Runtime functions are
/// declared, private, at the start of the enclosing module.
class RuntimeCalls {
public:
  RuntimeCalls(OpBuilder &builder, CollectiveOpInterface op);

  /// Calls `shardx_rt_cg_<kind>_<suffix>(in, out, extra..., axes)` on
  /// `in`'s buffer (copied only where it is not contiguous) and a fresh
  /// output of `outShape` (dynamic dims
  /// sized by `outDynSizes`) and returns the output as a tensor. Booleans
  /// move as i32 unless the op reduces them (an error).
  FailureOr<Value> flatCall(StringRef kind, Value in,
                            ArrayRef<int64_t> outShape, ArrayRef<Value> extra,
                            ValueRange outDynSizes = {});
  /// The error flatCall would give for elements of `elt` (at the op),
  /// before anything is built: a pattern that builds the call's `extra`
  /// operands first checks here, so that a failed pattern changes nothing;
  /// flatCall on `elt` does not fail after success here.
  LogicalResult checkElementType(Type elt);

  /// The asynchronous form of flatCall: here, a call of
  /// `shardx_rt_cg_<kind>_start_<suffix>(in, out, extra..., axes)` that
  /// returns a request; in front of `waitPoint`, a call of
  /// `shardx_rt_cg_wait_<suffix>(request, in, out)` (which keeps both
  /// buffers alive until then) and the output as a tensor, returned.
  /// Booleans take the synchronous flatCall.
  FailureOr<Value> flatCallAsync(StringRef kind, Value in,
                                 ArrayRef<int64_t> outShape,
                                 ArrayRef<Value> extra, Operation *waitPoint,
                                 ValueRange outDynSizes = {});

  /// This rank's index in the op's group.
  Value groupIndex();
  /// `table[j]` for an index value j (a select chain; tables are small).
  Value lookup(Value j, ArrayRef<int64_t> table);
  /// The dynamic sizes of tensor `t` (tensor.dim of each dynamic dim).
  SmallVector<Value> dynSizes(Value t);
  /// Moves dim `dim` of `t` to the front (or back with `inverse`).
  Value moveDim(Value t, int64_t dim, bool inverse);
  /// `t` reshaped (collapse then expand) to the static `shape`.
  Value reshape(Value t, ArrayRef<int64_t> shape);
  /// `t` transposed by `perm` (no op for the identity).
  Value transpose(Value t, ArrayRef<int64_t> perm);
  /// `v` as a flat 1-D memref argument that a synchronous call reads: a
  /// tensor's buffer (copied only where it is not contiguous), or a memref
  /// of the identity layout itself.
  Value flatBuffer(Value v);
  /// A constant i64 array as memref<?xi64, strided<[?], offset: ?>>.
  Value int64Array(ArrayRef<int64_t> values);
  /// A private runtime function `name`, declared once per module.
  func::FuncOp declare(StringRef name, TypeRange args, TypeRange results);
  Value i32(int64_t v);
  Value i64(int64_t v);
  Value index(int64_t v);

  OpBuilder &b;
  Location loc;

private:
  Value contiguous(Value t);
  Value privateCopy(Value t);
  Value flat(Value m);
  MemRefType dyn1D(Type elt);
  Value castElements(Value t, Type elt);
  FailureOr<std::string> suffix(Type elt);

  CollectiveOpInterface op;
  ModuleOp module;
};

} // namespace mlir::shardx

#endif // SHARDX_LIB_CONVERSION_SHARDXTORUNTIME_RUNTIMECALLS_H
