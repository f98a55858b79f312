//===- ShardXBase.td - ShardX dialect definition -----------*- tablegen -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_DIALECT_SHARDX_IR_SHARDXBASE_TD
#define SHARDX_DIALECT_SHARDX_IR_SHARDXBASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def ShardX_Dialect : Dialect {
  let name = "shardx";
  let cppNamespace = "::mlir::shardx";
  let summary = "Tensor layouts on device meshes and the collectives that move them";
  let description = [{
    The `shardx` dialect models how the tensors of a global (single-device)
    program are laid out on a mesh of devices, in PyTorch DTensor terms, and
    the collectives that move data between layouts.

    * `shardx.mesh` declares a named mesh of devices.
    * `#shardx.layout<@mesh, [...]>` gives a tensor one placement per mesh
      axis: `S(d)` (Shard), `SS(d, sf)` (StridedShard), `R` (Replicate) or
      `P(op)` (Partial, op one of sum, avg, max, min, prod). The attribute is
      stored and printed in a canonical form, so two spellings of one
      distribution are the same attribute.
    * `shardx.annotate` and `shardx.redistribute` constrain and change the
      layout of a global tensor.
    * The collectives (`shardx.all_gather`, ...) and local steps
      (`shardx.chunk`, ...) act on per-rank local tensors after SPMD
      expansion.
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let hasOperationAttrVerify = 1;
  let extraClassDeclaration = [{
    /// The name of the function argument / result attribute holding a layout.
    static constexpr ::llvm::StringLiteral getLayoutAttrName() {
      return ::llvm::StringLiteral("shardx.layout");
    }
    /// The name of the discardable attribute holding one layout per result.
    static constexpr ::llvm::StringLiteral getLayoutsAttrName() {
      return ::llvm::StringLiteral("shardx.layouts");
    }
    /// The name of the discardable attribute holding, per tensor operand, the
    /// layout the op's sharding strategy needs it in (set by
    /// shardx-propagate, consumed by shardx-insert-reshards).
    static constexpr ::llvm::StringLiteral getOperandLayoutsAttrName() {
      return ::llvm::StringLiteral("shardx.operand_layouts");
    }
    /// The name of the function attribute that shardx-localize leaves: the
    /// global types and layouts of the arguments and results.
    static constexpr ::llvm::StringLiteral getSignatureAttrName() {
      return ::llvm::StringLiteral("shardx.signature");
    }

    /// Mesh shapes seen by the parser, by symbol name, so that layouts
    /// spelled with StridedShard (whose canonical form depends on axis sizes)
    /// can be canonicalized while parsing. The last mesh parsed wins.
    void recordMeshShape(::llvm::StringRef name, ::llvm::ArrayRef<int64_t> shape);
    std::optional<::llvm::SmallVector<int64_t>> lookupMeshShape(::llvm::StringRef name);

    /// Registers the attributes (defined next to their storage).
    void registerAttributes();

  private:
    ::llvm::sys::SmartMutex<true> meshShapesMutex;
    ::llvm::StringMap<::llvm::SmallVector<int64_t>> meshShapes;
  public:
  }];
}

class ShardX_Op<string mnemonic, list<Trait> traits = []>
    : Op<ShardX_Dialect, mnemonic, traits>;

class ShardX_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<ShardX_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def ShardX_ReductionKind : I32EnumAttr<"ReductionKind",
    "the reduction a Partial layout or a reducing collective applies", [
      I32EnumAttrCase<"Sum", 0, "sum">,
      I32EnumAttrCase<"Avg", 1, "avg">,
      I32EnumAttrCase<"Max", 2, "max">,
      I32EnumAttrCase<"Min", 3, "min">,
      I32EnumAttrCase<"Prod", 4, "prod">
    ]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::mlir::shardx";
}

def ShardX_ReductionKindAttr
    : EnumAttr<ShardX_Dialect, ShardX_ReductionKind, "reduction"> {
  let assemblyFormat = "$value";
}

#endif // SHARDX_DIALECT_SHARDX_IR_SHARDXBASE_TD
