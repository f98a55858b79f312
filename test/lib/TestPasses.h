//===- TestPasses.h - ShardX test-only passes -------------------*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_TEST_LIB_TESTPASSES_H
#define SHARDX_TEST_LIB_TESTPASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::shardx::test {

#define GEN_PASS_DECL
#include "TestPasses.h.inc"

#define GEN_PASS_REGISTRATION
#include "TestPasses.h.inc"

} // namespace mlir::shardx::test

#endif // SHARDX_TEST_LIB_TESTPASSES_H
