//===- HostCode.cpp - The host unit's LLVM IR, for fast selection ---------===//
//
// Part of ShardX.
//
// The host code (the program's functions, the layer functions it calls, the
// entry wrappers) is compiled at -O0 with LLVM's fast instruction selector,
// which takes time linear in the code but no aggregate: a memref
// descriptor is a struct, and the entry wrappers, the layer functions'
// returns and their callers pass thousands of them. Whatever the fast
// selector does not take goes to the DAG selector, whose time grows with
// the aggregate involved. These rewrites leave the DAG selector as little
// as possible (HostCode.h).
//
//===----------------------------------------------------------------------===//

#include "HostCode.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/InstIterator.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/Module.h"
#include "llvm/Transforms/Utils/Cloning.h"

#include <functional>
#include <map>

using llvm::ArrayRef;
using llvm::cast;
using llvm::dyn_cast;
using llvm::isa;
using llvm::SmallVector;

/// The address of the field at `path` of a `type` at `ptr` (aligned to
/// `align`), and the alignment that field has there.
static std::pair<llvm::Value *, llvm::Align>
fieldAt(llvm::IRBuilder<> &b, llvm::Type *type, llvm::Value *ptr,
        llvm::Align align, ArrayRef<unsigned> path,
        const llvm::DataLayout &layout) {
  SmallVector<llvm::Value *> indices = {b.getInt32(0)};
  for (unsigned i : path)
    indices.push_back(b.getInt32(i));
  uint64_t offset = layout.getIndexedOffsetInType(type, indices);
  return {b.CreateInBoundsGEP(type, ptr, indices),
          llvm::commonAlignment(align, offset)};
}

/// Stores the aggregate `value` at `ptr` (aligned to `align`) one scalar
/// at a time, each at its GEP, taking the scalars from the insertvalue
/// chains that built `value` where they can (the fast instruction
/// selector takes neither aggregate stores nor insertvalue).
static void storeScalars(llvm::IRBuilder<> &b, llvm::Value *value,
                         llvm::Value *ptr, llvm::Align align,
                         const llvm::DataLayout &layout) {
  llvm::Type *type = value->getType();
  // What the insertvalue chains put at each index path, oldest first so
  // that a later insert replaces what an earlier one put at or under
  // its path (extractvalue of a long chain walks it per query: this
  // walks each chain once).
  std::map<SmallVector<unsigned>, llvm::Value *> at;
  std::function<void(llvm::Value *, const SmallVector<unsigned> &)> put =
      [&](llvm::Value *v, const SmallVector<unsigned> &prefix) {
        // Whatever was at or under `prefix` is replaced (those paths
        // sort together, from `prefix` on).
        auto under = [&](const SmallVector<unsigned> &p) {
          return p.size() >= prefix.size() &&
                 std::equal(prefix.begin(), prefix.end(), p.begin());
        };
        for (auto it = at.lower_bound(prefix);
             it != at.end() && under(it->first);)
          it = at.erase(it);
        SmallVector<llvm::InsertValueInst *> chain;
        llvm::Value *base = v;
        while (auto *ins = dyn_cast<llvm::InsertValueInst>(base)) {
          chain.push_back(ins);
          base = ins->getAggregateOperand();
        }
        if (chain.empty() || !isa<llvm::PoisonValue, llvm::UndefValue>(base))
          at[prefix] = base; // a whole value (or a chain's real base)
        for (llvm::InsertValueInst *ins : llvm::reverse(chain)) {
          SmallVector<unsigned> path = prefix;
          path.append(ins->idx_begin(), ins->idx_end());
          put(ins->getInsertedValueOperand(), path);
        }
      };
  put(value, {});
  // The scalar at `path`: the deepest entry at or above it, extracted.
  auto scalarAt = [&](ArrayRef<unsigned> path) -> llvm::Value * {
    for (size_t k = path.size() + 1; k-- > 0;) {
      auto it = at.find(SmallVector<unsigned>(path.take_front(k)));
      if (it == at.end())
        continue;
      return k == path.size()
                 ? it->second
                 : b.CreateExtractValue(it->second, path.drop_front(k));
    }
    return llvm::PoisonValue::get(
        llvm::ExtractValueInst::getIndexedType(type, path));
  };
  // One store per scalar, at its GEP, as aligned as the original.
  std::function<void(llvm::Type *, SmallVector<unsigned> &)> walk =
      [&](llvm::Type *t, SmallVector<unsigned> &path) {
        if (!t->isAggregateType()) {
          llvm::Value *scalar = scalarAt(path);
          auto [field, fieldAlign] = fieldAt(b, type, ptr, align, path, layout);
          b.CreateAlignedStore(scalar, field, fieldAlign);
          return;
        }
        unsigned n = t->isStructTy() ? t->getStructNumElements()
                                     : t->getArrayNumElements();
        for (unsigned i = 0; i < n; ++i) {
          path.push_back(i);
          walk(llvm::ExtractValueInst::getIndexedType(t, {i}), path);
          path.pop_back();
        }
      };
  SmallVector<unsigned> path;
  walk(type, path);
}

/// The host code's entry functions take and return every buffer of the
/// step as one aggregate (thousands of descriptors), which LLVM's fast
/// instruction selector cannot take: it falls back to DAGs whose size is
/// the aggregate's, in time that grows faster than it. The program's
/// function is inlined into its C wrapper (its one caller), and aggregate
/// loads and stores become loads and stores of their scalars.
void mlir::shardx::host::scalarizeEntryAggregates(llvm::Module &module) {
  for (llvm::Function &wrapper : module) {
    if (wrapper.isDeclaration() ||
        !wrapper.getName().starts_with("_mlir_ciface_"))
      continue;
    SmallVector<llvm::CallInst *> calls;
    for (llvm::Instruction &inst : llvm::instructions(wrapper))
      if (auto *call = dyn_cast<llvm::CallInst>(&inst))
        if (llvm::Function *callee = call->getCalledFunction();
            callee && !callee->isDeclaration() && callee->hasLocalLinkage() &&
            callee->hasOneUse())
          calls.push_back(call);
    for (llvm::CallInst *call : calls) {
      llvm::Function *callee = call->getCalledFunction();
      llvm::InlineFunctionInfo info;
      if (llvm::InlineFunction(*call, info).isSuccess() && callee->use_empty())
        callee->eraseFromParent();
    }
    SmallVector<llvm::Instruction *> aggregates;
    for (llvm::Instruction &inst : llvm::instructions(wrapper))
      if ((isa<llvm::LoadInst>(inst) && inst.getType()->isAggregateType()) ||
          (isa<llvm::StoreInst>(inst) &&
           inst.getOperand(0)->getType()->isAggregateType()))
        aggregates.push_back(&inst);
    for (llvm::Instruction *inst : aggregates) {
      llvm::IRBuilder<> b(inst);
      if (auto *load = dyn_cast<llvm::LoadInst>(inst)) {
        // Each extractvalue of the load becomes a load of its field.
        bool onlyExtracts = llvm::all_of(load->users(), [](llvm::User *u) {
          return isa<llvm::ExtractValueInst>(u);
        });
        if (!onlyExtracts)
          continue;
        for (llvm::User *u : llvm::make_early_inc_range(load->users())) {
          auto *extract = cast<llvm::ExtractValueInst>(u);
          auto [field, fieldAlign] = fieldAt(
              b, load->getType(), load->getPointerOperand(), load->getAlign(),
              extract->getIndices(), module.getDataLayout());
          extract->replaceAllUsesWith(
              b.CreateAlignedLoad(extract->getType(), field, fieldAlign));
          extract->eraseFromParent();
        }
        load->eraseFromParent();
        continue;
      }
      auto *store = cast<llvm::StoreInst>(inst);
      storeScalars(b, store->getValueOperand(), store->getPointerOperand(),
                   store->getAlign(), module.getDataLayout());
      store->eraseFromParent();
    }
  }
}

/// Whether LLVM's fast instruction selector takes `inst`: it does not take
/// aggregates (the memref descriptors the host code builds with
/// insertvalue, passes between its functions and returns).
static bool fastSelectable(const llvm::Instruction &inst) {
  if (isa<llvm::InsertValueInst, llvm::ExtractValueInst>(inst))
    return false;
  if (inst.getType()->isAggregateType())
    return false;
  for (const llvm::Value *op : inst.operands())
    if (op->getType()->isAggregateType())
      return false;
  return true;
}

/// Puts each run of instructions the fast instruction selector does not
/// take in a block of its own. It selects a block bottom up and, at the
/// first instruction it cannot take, hands that instruction and everything
/// above it in the block to the DAG selector, whose time grows faster than
/// the block: one insertvalue near the end of a layer function's single
/// block (building the descriptors it returns) sent the whole function
/// there (10-20 s of a 32-layer GPT's host code). Small blocks keep the
/// DAGs small; fall-through branches cost no instruction.
void mlir::shardx::host::isolateAggregateCode(llvm::Module &module) {
  for (llvm::Function &f : module) {
    if (f.isDeclaration())
      continue;
    // The entry block's fixed-size allocas stay there (frame slots, not
    // dynamic stack allocations): first in it, before any split.
    llvm::BasicBlock &entry = f.getEntryBlock();
    llvm::Instruction *first = &*entry.getFirstNonPHIOrDbgOrAlloca();
    for (llvm::Instruction &inst : llvm::make_early_inc_range(entry))
      if (auto *alloca = dyn_cast<llvm::AllocaInst>(&inst);
          alloca && isa<llvm::ConstantInt>(alloca->getArraySize()) &&
          alloca->comesBefore(entry.getTerminator()) &&
          !alloca->comesBefore(first))
        alloca->moveBefore(first->getIterator());
    SmallVector<llvm::BasicBlock *> blocks;
    for (llvm::BasicBlock &bb : f)
      blocks.push_back(&bb);
    for (llvm::BasicBlock *bb : blocks) {
      // Where runs start and end, top down; split bottom up, so that each
      // split moves only what lies below it up to the previous split.
      SmallVector<llvm::Instruction *> cuts;
      bool inRun = false;
      for (llvm::Instruction &inst : *bb) {
        if (isa<llvm::PHINode>(inst) || inst.isEHPad())
          continue;
        bool slow = !fastSelectable(inst);
        if (slow != inRun && &inst != &*bb->getFirstNonPHIOrDbgOrAlloca())
          cuts.push_back(&inst);
        inRun = slow;
      }
      for (llvm::Instruction *cut : llvm::reverse(cuts))
        bb->splitBasicBlock(cut);
    }
  }
}

/// Makes every extraction of a field from an extracted aggregate one
/// extraction from the outer aggregate: `extractvalue (extractvalue %a, i),
/// j` becomes `extractvalue %a, i, j`. A layer function returns a struct of
/// descriptors, and the host code takes a descriptor out of it and then
/// its fields; the fast instruction selector takes an extraction whose
/// result is a scalar, but the descriptor in between is an aggregate,
/// which it hands to the DAG selector (in a block of its own, whose DAG
/// copies the whole returned struct: about 0.7 ms each, 350 of them in a
/// 32-layer GPT step's host code).
void mlir::shardx::host::flattenExtractChains(llvm::Module &module) {
  for (llvm::Function &f : module) {
    SmallVector<llvm::ExtractValueInst *> inner;
    for (llvm::Instruction &inst : llvm::instructions(f)) {
      auto *extract = dyn_cast<llvm::ExtractValueInst>(&inst);
      if (!extract || !extract->getType()->isAggregateType())
        continue;
      bool foldable = !extract->use_empty();
      for (llvm::User *user : extract->users())
        foldable &= isa<llvm::ExtractValueInst>(user);
      if (foldable)
        inner.push_back(extract);
    }
    // Last defined first: an extraction folded into its users is erased
    // before the one it reads is visited, and the folded users of a chain
    // of three fold again into the first.
    for (llvm::ExtractValueInst *extract : llvm::reverse(inner)) {
      for (llvm::User *user : llvm::make_early_inc_range(extract->users())) {
        auto *outer = cast<llvm::ExtractValueInst>(user);
        SmallVector<unsigned> path(extract->indices());
        llvm::append_range(path, outer->indices());
        auto *flat = llvm::ExtractValueInst::Create(
            extract->getAggregateOperand(), path, outer->getName(),
            outer->getIterator());
        outer->replaceAllUsesWith(flat);
        outer->eraseFromParent();
      }
      extract->eraseFromParent();
    }
  }
}

/// Makes each function of the host code that returns an aggregate (a
/// layer function, `shardx_call_*`, returns a struct of descriptors) store
/// it through a pointer its caller passes instead: the fast instruction
/// selector does not lower a call whose return value does not fit in
/// registers, and the DAG selector, which does, copies the whole struct
/// at each call. The callee stores the scalars its insertvalue chains
/// built; each caller passes one stack slot per struct type (the calls'
/// results are loaded right after each call, so the calls can share it)
/// and loads the fields its extractvalues took. A function whose address
/// is taken, or a call whose result is used otherwise, is left as it is.
void mlir::shardx::host::demoteAggregateReturns(llvm::Module &module) {
  const llvm::DataLayout &layout = module.getDataLayout();
  SmallVector<llvm::Function *> functions;
  for (llvm::Function &f : module) {
    if (f.isDeclaration() || !f.hasLocalLinkage() ||
        !f.getReturnType()->isAggregateType() || f.isVarArg())
      continue;
    bool ok = true;
    for (llvm::Use &use : f.uses()) {
      auto *call = dyn_cast<llvm::CallInst>(use.getUser());
      ok = call && call->isCallee(&use) && !call->isMustTailCall();
      if (!ok)
        break;
      for (llvm::User *user : call->users())
        ok &= isa<llvm::ExtractValueInst>(user) &&
              !user->getType()->isAggregateType();
      if (!ok)
        break;
    }
    if (ok)
      functions.push_back(&f);
  }
  // Keyed by the caller's entry block, which a caller demoted itself keeps
  // (its blocks move to the new function; the old one is freed, and its
  // address may be a later function's).
  llvm::DenseMap<std::pair<llvm::BasicBlock *, llvm::Type *>,
                 llvm::AllocaInst *>
      slots;
  for (llvm::Function *f : functions) {
    llvm::LLVMContext &context = module.getContext();
    auto *resultType = f->getReturnType();
    llvm::Align resultAlign = layout.getPrefTypeAlign(resultType);
    SmallVector<llvm::Type *> params = {llvm::PointerType::get(context, 0)};
    llvm::append_range(params, f->getFunctionType()->params());
    auto *demoted = llvm::Function::Create(
        llvm::FunctionType::get(llvm::Type::getVoidTy(context), params, false),
        f->getLinkage(), f->getAddressSpace(), "", &module);
    demoted->copyAttributesFrom(f);
    SmallVector<llvm::AttributeSet> paramAttrs = {llvm::AttributeSet()};
    for (unsigned i = 0, e = f->arg_size(); i < e; ++i)
      paramAttrs.push_back(f->getAttributes().getParamAttrs(i));
    demoted->setAttributes(
        llvm::AttributeList::get(context, f->getAttributes().getFnAttrs(),
                                 llvm::AttributeSet(), paramAttrs));
    demoted->splice(demoted->begin(), f);
    for (unsigned i = 0, e = f->arg_size(); i < e; ++i) {
      demoted->getArg(i + 1)->takeName(f->getArg(i));
      f->getArg(i)->replaceAllUsesWith(demoted->getArg(i + 1));
    }
    llvm::Argument *out = demoted->getArg(0);
    SmallVector<llvm::ReturnInst *> returns;
    for (llvm::BasicBlock &bb : *demoted)
      if (auto *ret = dyn_cast<llvm::ReturnInst>(bb.getTerminator()))
        returns.push_back(ret);
    for (llvm::ReturnInst *ret : returns) {
      llvm::IRBuilder<> b(ret);
      storeScalars(b, ret->getReturnValue(), out, resultAlign, layout);
      b.CreateRetVoid();
      ret->eraseFromParent();
    }
    for (llvm::User *user : llvm::make_early_inc_range(f->users())) {
      auto *call = cast<llvm::CallInst>(user);
      llvm::BasicBlock &entry = call->getFunction()->getEntryBlock();
      llvm::AllocaInst *&slot = slots[{&entry, resultType}];
      if (!slot) {
        slot = new llvm::AllocaInst(resultType, layout.getAllocaAddrSpace(),
                                    nullptr, resultAlign, "",
                                    entry.getFirstInsertionPt());
      }
      llvm::IRBuilder<> b(call);
      SmallVector<llvm::Value *> args = {slot};
      llvm::append_range(args, call->args());
      llvm::CallInst *replacement = b.CreateCall(demoted, args);
      replacement->setCallingConv(call->getCallingConv());
      replacement->setDebugLoc(call->getDebugLoc());
      // The fields, loaded right after the new call (before the old one,
      // which goes last: the extractvalues after it go meanwhile), each
      // once.
      std::map<SmallVector<unsigned>, llvm::Value *> loaded;
      for (llvm::User *u : llvm::make_early_inc_range(call->users())) {
        auto *extract = cast<llvm::ExtractValueInst>(u);
        SmallVector<unsigned> path(extract->indices());
        llvm::Value *&field = loaded[path];
        if (!field) {
          auto [address, fieldAlign] =
              fieldAt(b, resultType, slot, resultAlign, path, layout);
          field = b.CreateAlignedLoad(extract->getType(), address, fieldAlign);
        }
        extract->replaceAllUsesWith(field);
        extract->eraseFromParent();
      }
      call->eraseFromParent();
    }
    demoted->takeName(f);
    f->eraseFromParent();
  }
}
