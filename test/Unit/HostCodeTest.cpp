//===- HostCodeTest.cpp - The host unit's rewrites for fast selection -----===//
//
// Part of ShardX.
//
// lib/Compiler/HostCode.h: a layer function's returned struct of
// descriptors becomes stores through a pointer its callers pass, and the
// callers load the fields they extracted; the module still verifies, and
// a function whose return value is used whole keeps it.
//
//===----------------------------------------------------------------------===//

#include "HostCode.h"

#include "llvm/AsmParser/Parser.h"
#include "llvm/IR/InstIterator.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

namespace {

using llvm::dyn_cast;
using llvm::isa;

// A layer function returning two descriptors; its caller takes the second
// descriptor out whole and then its fields (the chain the fast selector
// does not take), and the first descriptor's pointer directly.
constexpr const char *kLayerCall = R"(
%desc = type { ptr, ptr, i64, [1 x i64], [1 x i64] }
%pair = type { %desc, %desc }

define internal %pair @layer(ptr %p, i64 %n) {
  %a = insertvalue %desc poison, ptr %p, 0
  %b = insertvalue %desc %a, ptr %p, 1
  %c = insertvalue %desc %b, i64 0, 2
  %d = insertvalue %desc %c, i64 %n, 3, 0
  %e = insertvalue %desc %d, i64 1, 4, 0
  %f = insertvalue %pair poison, %desc %e, 0
  %g = insertvalue %desc %e, i64 4, 2
  %h = insertvalue %pair %f, %desc %g, 1
  ret %pair %h
}

define i64 @host(ptr %p) {
  %r = call %pair @layer(ptr %p, i64 8)
  %second = extractvalue %pair %r, 1
  %offset = extractvalue %desc %second, 2
  %size = extractvalue %desc %second, 3, 0
  %first = extractvalue %pair %r, 0, 1
  %again = call %pair @layer(ptr %first, i64 %size)
  %o2 = extractvalue %pair %again, 1, 2
  %sum = add i64 %offset, %o2
  ret i64 %sum
}

define internal %pair @other(ptr %p) {
  %a = insertvalue %desc poison, ptr %p, 0
  %b = insertvalue %pair poison, %desc %a, 0
  ret %pair %b
}

define internal %pair @kept(ptr %p) {
  %r = call %pair @other(ptr %p)
  ret %pair %r
}

define %pair @whole(ptr %p) {
  %r = call %pair @kept(ptr %p)
  ret %pair %r
}
)";

std::unique_ptr<llvm::Module> parse(llvm::LLVMContext &context,
                                    const char *text) {
  llvm::SMDiagnostic error;
  std::unique_ptr<llvm::Module> module =
      llvm::parseAssemblyString(text, error, context);
  if (!module)
    error.print("HostCodeTest", llvm::errs());
  return module;
}

std::string verifyErrors(const llvm::Module &module) {
  std::string errors;
  llvm::raw_string_ostream os(errors);
  llvm::verifyModule(module, &os);
  return errors;
}

TEST(HostCode, LayerResultsTravelThroughACallerSlot) {
  llvm::LLVMContext context;
  std::unique_ptr<llvm::Module> module = parse(context, kLayerCall);
  ASSERT_TRUE(module);
  mlir::shardx::host::flattenExtractChains(*module);
  mlir::shardx::host::demoteAggregateReturns(*module);
  EXPECT_EQ(verifyErrors(*module), "");

  llvm::Function *layer = module->getFunction("layer");
  ASSERT_TRUE(layer);
  EXPECT_TRUE(layer->getReturnType()->isVoidTy());
  ASSERT_EQ(layer->arg_size(), 3u);
  EXPECT_TRUE(layer->getArg(0)->getType()->isPointerTy());
  // The callee stores each scalar (5 per descriptor) through the slot and
  // returns nothing.
  unsigned stores = 0;
  for (llvm::Instruction &inst : llvm::instructions(layer)) {
    if (auto *ret = dyn_cast<llvm::ReturnInst>(&inst))
      EXPECT_EQ(ret->getReturnValue(), nullptr);
    if (auto *store = dyn_cast<llvm::StoreInst>(&inst)) {
      ++stores;
      EXPECT_FALSE(store->getValueOperand()->getType()->isAggregateType());
    }
  }
  EXPECT_EQ(stores, 10u);

  // The host loads what it extracted: no call returns a struct, no
  // extractvalue is left, both calls share one slot.
  llvm::Function *host = module->getFunction("host");
  unsigned calls = 0, allocas = 0;
  for (llvm::Instruction &inst : llvm::instructions(host)) {
    EXPECT_FALSE(isa<llvm::ExtractValueInst>(inst)) << "left: " << [&] {
      std::string s;
      llvm::raw_string_ostream os(s);
      inst.print(os);
      return s;
    }();
    if (auto *call = dyn_cast<llvm::CallInst>(&inst)) {
      ++calls;
      EXPECT_TRUE(call->getType()->isVoidTy());
      EXPECT_TRUE(isa<llvm::AllocaInst>(call->getArgOperand(0)));
    }
    allocas += isa<llvm::AllocaInst>(inst);
  }
  EXPECT_EQ(calls, 2u);
  EXPECT_EQ(allocas, 1u);

  // Functions whose results are returned whole keep their returns.
  for (const char *name : {"other", "kept"}) {
    llvm::Function *kept = module->getFunction(name);
    ASSERT_TRUE(kept);
    EXPECT_TRUE(kept->getReturnType()->isStructTy()) << name;
    EXPECT_EQ(kept->arg_size(), 1u) << name;
  }
}

TEST(HostCode, ChainsOfThreeExtractionsFoldIntoOne) {
  llvm::LLVMContext context;
  std::unique_ptr<llvm::Module> module = parse(context, R"(
define i64 @f({ { { i64, i64 } } } %a) {
  %b = extractvalue { { { i64, i64 } } } %a, 0
  %c = extractvalue { { i64, i64 } } %b, 0
  %d = extractvalue { i64, i64 } %c, 1
  ret i64 %d
}
)");
  ASSERT_TRUE(module);
  mlir::shardx::host::flattenExtractChains(*module);
  EXPECT_EQ(verifyErrors(*module), "");
  llvm::Function *f = module->getFunction("f");
  unsigned extracts = 0;
  for (llvm::Instruction &inst : llvm::instructions(f))
    if (auto *extract = dyn_cast<llvm::ExtractValueInst>(&inst)) {
      ++extracts;
      EXPECT_EQ(extract->getNumIndices(), 3u);
    }
  EXPECT_EQ(extracts, 1u);
}

} // namespace
