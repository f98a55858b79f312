//===- LocalPieces.h - Local types and this rank's pieces -------*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// What shardx-localize asks of a layout on one mesh: the local type of a
// global value under its recorded layout, and the offset and size of this
// rank's piece of a split dim as index values (mesh axis indices, then
// torch.chunk's or the explicit sizes' arithmetic).
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PARTITION_LOCALPIECES_H
#define SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PARTITION_LOCALPIECES_H

#include "shardx/Dialect/ShardX/IR/LibraryNames.h"
#include "shardx/Dialect/ShardX/IR/ShardX.h"

#include "mlir/IR/Builders.h"

#include <vector>

namespace mlir::shardx {

class LocalPieces {
public:
  explicit LocalPieces(MeshOp mesh)
      : meshRef(FlatSymbolRefAttr::get(mesh.getSymNameAttr())),
        meshShape(mesh.getShape().begin(), mesh.getShape().end()),
        meshRank(mesh.getShape().size()) {}

  FlatSymbolRefAttr getMeshRef() const { return meshRef; }
  ArrayRef<int64_t> getMeshShape() const { return meshShape; }
  int64_t getMeshRank() const { return meshRank; }

  /// The recorded layout of the global value `v` (replicated when none).
  Layout layoutOf(Value v) const;

  /// The local type of the global tensor value `v`; errors at `where`.
  FailureOr<RankedTensorType> localType(Value v, Operation *where) const;

  /// The offset and size (index values) of this rank's piece of a dim of
  /// global size `size` split by `ds` (stride-1 splits or explicit sizes).
  std::pair<Value, Value> emitPiece(OpBuilder &b, Location loc,
                                    const DimSharding &ds, int64_t size) const;

  /// The dynamic sizes of `local` (the local type of `global` under
  /// `layout`), in dim order. `global` is static: a dynamic global tensor
  /// is local only where replicated (localType), its own local tensor.
  SmallVector<Value> dynamicSizes(OpBuilder &b, Location loc,
                                  RankedTensorType global,
                                  RankedTensorType local,
                                  const Layout &layout) const;

private:
  FlatSymbolRefAttr meshRef;
  std::vector<int64_t> meshShape;
  int64_t meshRank;
};

} // namespace mlir::shardx

#endif // SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PARTITION_LOCALPIECES_H
