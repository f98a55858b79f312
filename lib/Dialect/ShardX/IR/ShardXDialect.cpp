//===- ShardXDialect.cpp - ShardX dialect ---------------------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Dialect/ShardX/IR/IndexChecks.h"
#include "shardx/Dialect/ShardX/IR/ShardX.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Transforms/InliningUtils.h"

using namespace mlir;
using namespace mlir::shardx;

namespace {
/// Every ShardX op inside a function may be inlined into its caller: the
/// attention ops and layout constraints of a traced region's function (a
/// repeated layer) join the step's body before propagation. Without it the
/// inliner keeps such a call, which then runs replicated.
struct ShardXInlinerInterface : DialectInlinerInterface {
  using DialectInlinerInterface::DialectInlinerInterface;
  bool isLegalToInline(Operation *, Region *, bool,
                       IRMapping &) const final {
    return true;
  }
};
} // namespace

#include "shardx/Dialect/ShardX/IR/ShardXDialect.cpp.inc"
#include "shardx/Dialect/ShardX/IR/ShardXInterfaces.cpp.inc"

void ShardXDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "shardx/Dialect/ShardX/IR/ShardXOps.cpp.inc"
      >();
  registerAttributes();
  addInterfaces<ShardXInlinerInterface>();
}

void ShardXDialect::recordMeshShape(StringRef name, ArrayRef<int64_t> shape) {
  llvm::sys::SmartScopedLock<true> lock(meshShapesMutex);
  meshShapes[name] = SmallVector<int64_t>(shape);
}

std::optional<SmallVector<int64_t>>
ShardXDialect::lookupMeshShape(StringRef name) {
  llvm::sys::SmartScopedLock<true> lock(meshShapesMutex);
  auto it = meshShapes.find(name);
  if (it == meshShapes.end())
    return std::nullopt;
  return it->second;
}

//===----------------------------------------------------------------------===//
// Verification of layouts on function arguments, results and ops
//===----------------------------------------------------------------------===//

/// Verifies a `shardx.layout` attribute on argument or result `index` of a
/// function-like `op`.
static LogicalResult verifyFunctionLayout(Operation *op, unsigned index,
                                          NamedAttribute attr, bool isResult) {
  std::string what =
      (isResult ? "result #" : "argument #") + std::to_string(index);
  if (attr.getName() != ShardXDialect::getLayoutAttrName())
    return op->emitError() << "unknown ShardX attribute '"
                           << attr.getName().getValue() << "' on " << what;
  auto layout = dyn_cast<LayoutAttr>(attr.getValue());
  if (!layout)
    return op->emitError() << "'" << attr.getName().getValue() << "' on "
                           << what << " must be a #shardx.layout, got "
                           << attr.getValue();
  Type type;
  std::optional<Location> loc;
  if (auto fn = dyn_cast<FunctionOpInterface>(op)) {
    ArrayRef<Type> types =
        isResult ? fn.getResultTypes() : fn.getArgumentTypes();
    if (index < types.size())
      type = types[index];
    // An argument of a function with a body has its own location (the
    // entry block may not match the signature yet: the function's own
    // verifier runs after its attributes').
    if (!isResult && !fn.isExternal() &&
        index < fn.getFunctionBody().front().getNumArguments())
      loc = fn.getFunctionBody().front().getArgument(index).getLoc();
  }
  if (!type)
    return op->emitError() << "layout on " << what
                           << " of an op that is not a function";
  return verifyLayoutAt(op, layout, type, what + " layout", nullptr, loc);
}

LogicalResult ShardXDialect::verifyRegionArgAttribute(Operation *op, unsigned,
                                                      unsigned argIndex,
                                                      NamedAttribute attr) {
  return verifyFunctionLayout(op, argIndex, attr, /*isResult=*/false);
}

FailureOr<SmallVector<IndexCheckText>>
mlir::shardx::getIndexChecks(Attribute value) {
  auto array = dyn_cast<ArrayAttr>(value);
  if (!array || array.empty())
    return failure();
  SmallVector<IndexCheckText> checks;
  for (Attribute a : array) {
    auto entry = dyn_cast<DictionaryAttr>(a);
    auto exception = entry ? entry.getAs<StringAttr>("exception") : nullptr;
    auto message = entry ? entry.getAs<StringAttr>("message") : nullptr;
    if (!exception || !message || entry.size() != 2)
      return failure();
    checks.emplace_back(exception.getValue(), message.getValue());
  }
  return checks;
}

/// Verifies a `shardx.index_checks` attribute on result `index` of `op`
/// (IndexChecks.h): the checks' list, on a function's 0-d i64 result (a
/// tensor; a memref once bufferized).
static LogicalResult verifyIndexChecks(Operation *op, unsigned index,
                                       NamedAttribute attr) {
  std::string what =
      "'" + attr.getName().str() + "' on result #" + std::to_string(index);
  if (failed(getIndexChecks(attr.getValue())))
    return op->emitError() << what
                           << " must be an array of one or more {exception = "
                              "\"...\", message = \"...\"} dictionaries, got "
                           << attr.getValue();
  auto fn = dyn_cast<FunctionOpInterface>(op);
  if (!fn)
    return op->emitError() << what << " of an op that is not a function";
  if (index >= fn.getResultTypes().size())
    return success(); // the function's own verifier reports it
  auto shaped = dyn_cast<ShapedType>(fn.getResultTypes()[index]);
  if (shaped && (!shaped.hasRank() || shaped.getRank() != 0 ||
                 !shaped.getElementType().isInteger(64)))
    return op->emitError() << what << " must mark a 0-d i64 result, not "
                           << shaped;
  return success();
}

LogicalResult ShardXDialect::verifyRegionResultAttribute(Operation *op,
                                                         unsigned,
                                                         unsigned resultIndex,
                                                         NamedAttribute attr) {
  if (attr.getName() == kIndexChecksAttrName)
    return verifyIndexChecks(op, resultIndex, attr);
  return verifyFunctionLayout(op, resultIndex, attr, /*isResult=*/true);
}

LogicalResult ShardXDialect::verifyOperationAttribute(Operation *op,
                                                      NamedAttribute attr) {
  // Code generation's notes on the module (lib/Compiler): the program
  // description until the artifact embeds it, and the cuda target's entry
  // signatures for host staging.
  if (attr.getName() == "shardx.program_info") {
    if (!isa<ModuleOp>(op) || !isa<StringAttr>(attr.getValue()))
      return op->emitError("'shardx.program_info' must be a string on a "
                           "module");
    return success();
  }
  // A copy made by shardx-recompute-activations (code generation): it
  // keeps CSE from merging the copy back into its original.
  if (attr.getName() == "shardx.recomputed") {
    if (!isa<UnitAttr>(attr.getValue()))
      return op->emitError("'shardx.recomputed' must be a unit attribute");
    return success();
  }
  // shardx-auto-shard's recomputation policy for a function under its
  // memory budget (shardx/Analysis/Recompute.h), which code generation
  // applies (shardx-recompute-activations{policy=plan}).
  if (attr.getName() == "shardx.recompute") {
    auto policy = dyn_cast<StringAttr>(attr.getValue());
    if (!isa<FunctionOpInterface>(op) || !policy ||
        !llvm::is_contained({"none", "selective", "aggressive"},
                            policy.getValue()))
      return op->emitError("'shardx.recompute' must be \"none\", "
                           "\"selective\" or \"aggressive\" on a function");
    return success();
  }
  if (attr.getName() == "shardx.staging_signatures") {
    auto dict = dyn_cast<DictionaryAttr>(attr.getValue());
    if (!isa<ModuleOp>(op) || !dict ||
        !llvm::all_of(dict, [](NamedAttribute entry) {
          return isa<StringAttr>(entry.getValue());
        }))
      return op->emitError("'shardx.staging_signatures' must be a dictionary "
                           "of strings on a module");
    return success();
  }
  if (attr.getName() == "shardx.ragged_rows") {
    // shardx-ragged-experts: the op's rows stay on their experts' ranks.
    if (!isa<UnitAttr>(attr.getValue()))
      return op->emitError("'shardx.ragged_rows' must be a unit attribute");
    return success();
  }
  if (attr.getName() == "shardx.ragged_dispatch") {
    // shardx-ragged-dispatch: a local op of an MoE's dispatch and combine.
    if (!isa<UnitAttr>(attr.getValue()))
      return op->emitError("'shardx.ragged_dispatch' must be a unit attribute");
    return success();
  }
  if (attr.getName() == kRankValueAttr) {
    // shardx-convert-to-runtime: a call's result as a function of the rank.
    auto dict = dyn_cast<DictionaryAttr>(attr.getValue());
    if (!dict || !dict.getAs<DenseI64ArrayAttr>("mesh_shape") ||
        !dict.getAs<DenseI64ArrayAttr>("axes") ==
            !dict.getAs<DenseI64ArrayAttr>("values"))
      return op->emitError()
             << "'" << kRankValueAttr
             << "' must be {mesh_shape = array<i64: ...>, and axes or values "
                "= array<i64: ...>}";
    return success();
  }
  if (attr.getName() == "shardx.table_layout") {
    if (!isa<LayoutAttr>(attr.getValue()))
      return op->emitError("'shardx.table_layout' must be a #shardx.layout");
    return success();
  }
  if (attr.getName() == "shardx.alternatives") {
    // shardx-propagate{record-alternatives}: [{cost, operands, results}].
    auto isLayouts = [](Attribute a) {
      auto array = dyn_cast_or_null<ArrayAttr>(a);
      return array && llvm::all_of(array, llvm::IsaPred<LayoutAttr>);
    };
    auto array = dyn_cast<ArrayAttr>(attr.getValue());
    if (!array || !llvm::all_of(array, [&](Attribute a) {
          auto entry = dyn_cast<DictionaryAttr>(a);
          return entry && isa_and_nonnull<FloatAttr>(entry.get("cost")) &&
                 isLayouts(entry.get("operands")) &&
                 isLayouts(entry.get("results"));
        }))
      return op->emitError("'shardx.alternatives' must be an array of "
                           "{cost = <float>, operands = [layouts], results "
                           "= [layouts]} dictionaries");
    return success();
  }
  if (attr.getName() == getSignatureAttrName()) {
    if (!isa<DictionaryAttr>(attr.getValue()))
      return op->emitError() << "'" << getSignatureAttrName()
                             << "' must be a dictionary";
    return success();
  }
  bool operands = attr.getName() == getOperandLayoutsAttrName();
  if (attr.getName() != getLayoutsAttrName() && !operands)
    return op->emitError() << "unknown ShardX attribute '"
                           << attr.getName().getValue() << "' on an op"
                           << (attr.getName() == getLayoutAttrName()
                                   ? " (ops carry 'shardx.layouts', one "
                                     "layout per tensor result)"
                                   : "");
  auto layouts = dyn_cast<ArrayAttr>(attr.getValue());
  SmallVector<Value> tensorResults;
  for (Value v : operands ? ValueRange(op->getOperands())
                          : ValueRange(op->getResults()))
    if (isa<TensorType>(v.getType()))
      tensorResults.push_back(v);
  StringRef kind = operands ? "operand" : "result";
  if (!layouts || layouts.size() != tensorResults.size())
    return op->emitError() << "'" << attr.getName().getValue()
                           << "' must be an array of one #shardx.layout per "
                              "tensor "
                           << kind << " (" << tensorResults.size() << ")";
  for (auto [i, entry] : llvm::enumerate(layouts)) {
    auto layout = dyn_cast<LayoutAttr>(entry);
    if (!layout)
      return op->emitError() << "'" << attr.getName().getValue() << "' entry #"
                             << i << " is not a #shardx.layout: " << entry;
    if (failed(verifyLayoutAt(op, layout, tensorResults[i].getType(),
                              kind + " #" + Twine(i) + " layout")))
      return failure();
  }
  return success();
}

StringRef mlir::shardx::getTrainStepPhase(Location loc) {
  StringRef phase;
  loc->walk([&](Location l) {
    auto fused = dyn_cast<FusedLoc>(l);
    auto tag = fused ? dyn_cast_or_null<StringAttr>(fused.getMetadata())
                     : StringAttr();
    if (!tag || !llvm::is_contained({"forward", "backward", "optimizer"},
                                    tag.getValue()))
      return WalkResult::advance();
    phase = tag.getValue();
    return WalkResult::interrupt();
  });
  return phase;
}
