//===- InitAll.h - Register ShardX and the dialects it works on -*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_INITALL_H
#define SHARDX_INITALL_H

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace mlir::shardx {

/// Registers the ShardX dialect.
void registerShardXDialect(DialectRegistry &registry);
/// Registers the ShardX dialect plus the upstream dialects a traced program
/// and its lowering use (func, arith, math, tensor, linalg, tosa, scf,
/// bufferization, memref), with the sharding rules of their ops, and
/// upstream's `shard` dialect (programs `shardx-import-shard` imports).
void registerAllShardXDialects(DialectRegistry &registry);
/// Registers every ShardX pass with the global pass registry.
void registerShardXPasses();

} // namespace mlir::shardx

#endif // SHARDX_INITALL_H
