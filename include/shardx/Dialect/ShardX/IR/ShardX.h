//===- ShardX.h - ShardX dialect, attributes and ops ------------*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_DIALECT_SHARDX_IR_SHARDX_H
#define SHARDX_DIALECT_SHARDX_IR_SHARDX_H

#include "shardx/Layout/Layout.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Mutex.h"

#include "shardx/Dialect/ShardX/IR/ShardXDialect.h.inc"
#include "shardx/Dialect/ShardX/IR/ShardXEnums.h.inc"

namespace mlir::shardx::detail {
/// LayoutAttr's storage, written by hand in ShardXAttrs.cpp: it also holds
/// the canonical ::shardx::Layout.
struct LayoutAttrStorage;
} // namespace mlir::shardx::detail

#define GET_ATTRDEF_CLASSES
#include "shardx/Dialect/ShardX/IR/ShardXAttrs.h.inc"

namespace mlir::shardx::detail {
/// Whether op class `OpT` has a `reduction` / `sizes` attribute (the
/// default implementations of CollectiveOpInterface read them).
template <typename OpT>
using GetReductionT = decltype(std::declval<OpT &>().getReduction());
template <typename OpT>
using GetSizesT = decltype(std::declval<OpT &>().getSizes());
template <typename OpT>
constexpr bool hasReduction = llvm::is_detected<GetReductionT, OpT>::value;
template <typename OpT>
constexpr bool hasSizes = llvm::is_detected<GetSizesT, OpT>::value;

/// The product of the sizes of `axes` of the mesh `meshRef`; an error at
/// `op` when the mesh is unknown.
FailureOr<int64_t> getGroupSize(Operation *op, FlatSymbolRefAttr meshRef,
                                ArrayRef<int64_t> axes);
} // namespace mlir::shardx::detail

#include "shardx/Dialect/ShardX/IR/ShardXInterfaces.h.inc"

#define GET_OP_CLASSES
#include "shardx/Dialect/ShardX/IR/ShardXOps.h.inc"

namespace mlir::shardx {

/// The train-step phase the importer records in an op's location
/// (`loc(fused<"forward">[...])`, also inside other fused, name and call-site
/// locations): "forward", "backward", "optimizer", or "" when it has none.
StringRef getTrainStepPhase(Location loc);

/// Converts between the dialect's reduction enum and the layout library's.
ReductionKind toReductionKind(::shardx::ReduceOp op);
::shardx::ReduceOp toReduceOp(ReductionKind kind);

/// What a runtime call returns as a function of the rank, kept on the calls
/// shardx-convert-to-runtime makes of rank-dependent values (the rank's index
/// in a group, an exchange's local size): `{mesh_shape = array<i64: ...>,
/// axes = array<i64: ...>}`, the rank's index in the group of `axes`, or
/// `{mesh_shape = ..., values = array<i64: ...>}`, `values[r]` on the rank of
/// row-major index r. A converted program's rank-dependent sizes can then
/// still be computed per rank (the memory model's bounds, shardx/Analysis).
inline constexpr llvm::StringLiteral kRankValueAttr = "shardx.rank_value";
/// The most ranks a mesh may have for its rank-dependent values to be
/// tabled per rank (`values`) and visited by the memory model's bounds.
inline constexpr int64_t kRankValueMaxRanks = 4096;

/// Looks up the mesh `meshRef` from `from`, or emits an error at `from` and
/// returns null.
MeshOp lookupMesh(Operation *from, FlatSymbolRefAttr meshRef,
                  SymbolTableCollection *symbolTable = nullptr);

/// Verifies `layout` against its mesh (looked up from `op`) and `type`.
/// Emits `what`-prefixed errors at `loc` (default: `op`'s location).
LogicalResult verifyLayoutAt(Operation *op, LayoutAttr layout, Type type,
                             const llvm::Twine &what,
                             SymbolTableCollection *symbolTable = nullptr,
                             std::optional<Location> loc = std::nullopt);

/// The local type of a global tensor under `layout`: static where every
/// rank's shard has the same size, dynamic elsewhere. LayoutAttr::getLocalType
/// caches it per attribute.
RankedTensorType getLocalType(RankedTensorType global,
                              const ::shardx::Layout &layout,
                              ArrayRef<int64_t> meshShape);


/// Whether `op` is one of ShardX's computations (the attention ops): an op
/// of the global program that has a sharding rule and runs on every rank's
/// piece, unlike the collectives and the layout ops.
bool isShardXComputation(Operation *op);

/// The dims of an attention op (`shardx.attention`, `attention_dq`,
/// `attention_dkv`), from its `q`, `k` and `v` types: `q` is
/// `[batch, heads, queries, width]`, `k` `[batch, kvHeads, keys, width]`,
/// `v` `[batch, kvHeads, keys, valueWidth]`; `groups` query heads share a
/// key/value head. ShapedType::kDynamic where a dim is not static (`groups`
/// too, unless both head counts are).
struct AttentionDims {
  int64_t batch, heads, kvHeads, groups, queries, keys, width, valueWidth;
  static AttentionDims get(Operation *op);
};

} // namespace mlir::shardx

#endif // SHARDX_DIALECT_SHARDX_IR_SHARDX_H
