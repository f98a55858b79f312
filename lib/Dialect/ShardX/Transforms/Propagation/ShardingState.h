//===- ShardingState.h - The layouts propagation chose per op ---*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// One op's layouts (`OpLayouts`: the layouts it needs its tensor operands in
// and the layouts of its tensor results; the "sharding strategy" of an op in
// DTensor's words) and the state of a propagation: a map from op to its
// layouts. A search reads and changes the map only; the
// pass writes it to the IR once, at the end (`shardx.operand_layouts`,
// `shardx.layouts`, `shardx.table_layout`).
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_SHARDINGSTATE_H
#define SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_SHARDINGSTATE_H

#include "shardx/Dialect/ShardX/IR/LibraryNames.h"
#include "shardx/Dialect/ShardX/IR/ShardX.h"
#include "shardx/Layout/Layout.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/MapVector.h"

namespace mlir::shardx {

/// One op's layouts: what it needs of each tensor operand, what each tensor
/// result holds.
struct OpLayouts {
  bool valid = false;
  /// The layouts as plain values, while a search builds them; a search may
  /// drop them once the attributes are attached (`dropLayouts`).
  SmallVector<Layout> operandLayouts; // per tensor operand
  SmallVector<Layout> resultLayouts;  // per tensor result
  double cost = 0;
  int64_t shardedWork = 1; // ranks sharing the op's iteration space
  /// The halo exchanges the op's windowed operands need (shardx.halo): per
  /// permute shardx-lower-halos will emit, the mesh axis and its bytes.
  SmallVector<std::pair<int64_t, int64_t>, 2> halos;
  /// The same layouts as attributes (uniqued: compared by pointer). The
  /// attribute holds its layout (`LayoutAttr::getLayout`).
  SmallVector<LayoutAttr> operandAttrs, resultAttrs;

  bool sameLayouts(const OpLayouts &o) const {
    return operandAttrs == o.operandAttrs && resultAttrs == o.resultAttrs;
  }
  /// Whether the attribute forms are filled (also when the plain layouts
  /// were dropped).
  bool hasAttrs() const {
    return operandAttrs.size() >= operandLayouts.size() &&
           resultAttrs.size() >= resultLayouts.size();
  }
  /// Keeps only the attribute forms: a copy is then a few pointers.
  void dropLayouts() {
    operandLayouts.clear();
    resultLayouts.clear();
  }
};

/// "(operand layouts) -> (result layouts)", for debug traces.
std::string describe(const OpLayouts &s);

/// The position of `result` among its owner's tensor results (the index of
/// its layout in a strategy's `resultAttrs`).
unsigned tensorResultIndex(OpResult result);

class ShardingState {
public:
  ShardingState(FlatSymbolRefAttr mesh, int64_t meshRank);

  LayoutAttr attr(const Layout &l) const { return LayoutAttr::get(mesh, l); }
  LayoutAttr getReplicated() const { return replicated; }
  /// Fills the attribute forms of `s`'s layouts.
  void attach(OpLayouts &s) const;

  /// Room for the strategies of `numOps` ops.
  void reserve(size_t numOps) { opLayouts.reserve(numOps); }
  /// Sets `op`'s strategy (its attribute forms filled when missing).
  void set(Operation *op, OpLayouts s);
  /// `op`'s strategy, or null when it has none.
  OpLayouts *find(Operation *op);
  /// `op`'s strategy; `op` must have one.
  OpLayouts &get(Operation *op);

  /// The layout `v` has now: its producer's strategy, else its recorded
  /// layout (a function argument's, an annotation's), else replicated.
  LayoutAttr layoutOf(Value v) const;

  /// The layout `op` reads the tensor its region captures in (an
  /// embedding lookup's table); null when it reads captured tensors whole.
  void setCapturedLayout(Operation *op, LayoutAttr layout) {
    capturedLayouts[op] = layout;
  }
  void clearCapturedLayout(Operation *op) { capturedLayouts.erase(op); }
  LayoutAttr getCapturedLayout(Operation *op) const {
    return capturedLayouts.lookup(op);
  }

  /// Writes every strategy to its op: `shardx.operand_layouts` (when it has
  /// tensor operands), `shardx.layouts` (when it has tensor results) and
  /// `shardx.table_layout`.
  void writeToIR() const;

private:
  FlatSymbolRefAttr mesh;
  LayoutAttr replicated;
  llvm::MapVector<Operation *, OpLayouts> opLayouts;
  DenseMap<Operation *, LayoutAttr> capturedLayouts;
};

} // namespace mlir::shardx

#endif // SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_PROPAGATION_SHARDINGSTATE_H
