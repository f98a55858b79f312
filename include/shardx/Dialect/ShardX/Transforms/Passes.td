//===- Passes.td - ShardX passes ---------------------------*- tablegen -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_DIALECT_SHARDX_TRANSFORMS_PASSES_TD
#define SHARDX_DIALECT_SHARDX_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// Mixed precision
//===----------------------------------------------------------------------===//

def InlineCallsPass : Pass<"shardx-inline-calls", "ModuleOp"> {
  let summary = "inlines calls, if the module has any";
  let description = [{
    The first pass of `shardx-spmd`: propagation then sees one body per
    entry point. On a module without calls it does nothing (upstream's
    inliner would still build the call graph and run its simplification
    pipeline on every function).
  }];
}

def WidenAccumulationPass : Pass<"shardx-widen-accumulation", "ModuleOp"> {
  let summary = "accumulates bf16/f16 reductions and contractions in f32";
  let description = [{
    Every linalg op on tensors with a reduction loop whose result is bf16 or
    f16 (a matmul under `torch.autocast`, a sum, a mean) is rewritten to
    accumulate in f32 and round once at the end, as PyTorch's bf16/f16
    kernels and cuBLAS's `CUBLAS_COMPUTE_32F` do: the op is generalized,
    its body computes in f32 (low-precision operands are extended where
    they are read; the body's own rounding steps are dropped), its init is
    the f32 image of the old one (a zero fill stays a fill), and its result
    is truncated back. Bodies with ops other than arith/math (or
    `arith.bitcast`) are left alone.

    With `contractions=false`, contractions (multiply-add bodies) are left
    alone: the SPMD pipeline runs it so before propagation (the target is
    not known yet), the cuda target's GEMMs accumulate in f32 inside cuBLAS
    (`CUBLAS_COMPUTE_32F` on bf16/f16 A, B and C), and the cpu target widens
    them at the start of code generation (its bf16/f16 GEMMs are loop nests).

    ```mlir
    %c = linalg.matmul ins(%a, %b : tensor<8x16xbf16>, tensor<16x4xbf16>)
                       outs(%zero : tensor<8x4xbf16>) -> tensor<8x4xbf16>
    // becomes
    %acc = linalg.generic {...} ins(%a, %b : ...bf16...)
                                outs(%zero32 : tensor<8x4xf32>) {
      %x = arith.extf %in0 : bf16 to f32
      %y = arith.extf %in1 : bf16 to f32
      %p = arith.mulf %x, %y : f32
      %s = arith.addf %out, %p : f32
      linalg.yield %s : f32
    } -> tensor<8x4xf32>
    %c = linalg.generic {...} ins(%acc) ... arith.truncf ... -> tensor<8x4xbf16>
    ```
  }];
  let options = [
    Option<"contractions", "contractions", "bool", /*default=*/"true",
           "also widen contractions (matmuls)">,
  ];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::tensor::TensorDialect"];
}

def CanonicalizePass : Pass<"shardx-canonicalize", "ModuleOp"> {
  let summary = "upstream's canonicalizer, simplifying regions only where a "
                "region has several blocks";
  let description = [{
    `shardx-spmd`'s canonicalization before propagation: upstream's
    `canonicalize` pass (its patterns, top-down). Where the module has a
    region of more than one block, with upstream's options (region
    simplification, up to 10 rounds); otherwise without region
    simplification and in one round. In a region of one block, region
    simplification finds nothing that the driver's own erasure of dead ops
    does not, and a second round (the worklist re-seeded with every op, to
    confirm that nothing is left: the driver already revisits what a
    pattern changed) changed nothing on traced programs; the two were
    three quarters of the canonicalizer's time there. A function of several
    blocks whose join is dead becomes one block, which propagation can
    take:

    ```mlir
    func.func @f(%x: tensor<4xf32>, %c: i1) -> tensor<4xf32> {
      cf.cond_br %c, ^bb1, ^bb2
    ^bb1:
      %p = arith.addf %x, %x : tensor<4xf32>
      cf.br ^bb3(%p : tensor<4xf32>)
    ^bb2:
      cf.br ^bb3(%x : tensor<4xf32>)
    ^bb3(%y: tensor<4xf32>):
      return %x : tensor<4xf32>
    }
    // after: return %x : tensor<4xf32>
    ```
  }];
}

//===----------------------------------------------------------------------===//
// Propagation and reshard insertion
//===----------------------------------------------------------------------===//

def PropagatePass : Pass<"shardx-propagate", "ModuleOp"> {
  let summary = "gives every tensor value a layout, choosing each op's "
                "sharding strategy by communication cost";
  let description = [{
    Seeds: `shardx.layout` on function arguments and results and
    `shardx.annotate` ops (hard constraints). Forward, backward and
    optimizer update are one program. First, in program order: for each op
    with a sharding rule the candidate strategies are every tensor operand's
    layout seen through the rule's factors, merged with the compatible
    shardings of the other operands, plus the replicated strategy, priced as
    the sum of the reshard plans (alpha-beta model of the mesh,
    `shardx-print-plan`) its operands would need; the cheapest wins, ties
    going to the strategy that shards more. Then (`refine`) a whole-graph
    local search: the function's cost is the sum of every value's reshards
    to the distinct layouts its consumers need plus every op's local loop
    time at `compute-rate`; sweeps change one op's strategy, or an op
    together with the neighbours it disturbs (bounded cascades), whenever
    that lowers the total. docs/Propagation.md has the details. The search
    is an object named by `strategy` (lib/Dialect/ShardX/Transforms/
    Propagation/PropagationSearch.h): `greedy` is the one above; the
    choices live in a map during the search and are written to the IR
    once, at the end.

    Partial follows DTensor's algebra: a reduction over a sharded factor
    gives Partial with the reduction's combiner (sum, max, min, prod) when its
    init is that combiner's identity; an operand may stay Partial(sum|avg)
    through an op that is linear in it (matmul, add of partials, scaling by
    a replicated value, select against zero, data movement); anything else
    reduces it first. A Partial is never dropped.

    Ops without a rule get one warning per op kind and run replicated.
    Results: `shardx.layouts` on every op with tensor results and
    `shardx.operand_layouts` (the layouts the chosen strategy needs) on every
    op with tensor operands; function results end in their declared layout,
    or the propagated one with any pending Partial reduced.

    With `record-alternatives`, each op whose strategy the search chose also
    gets `shardx.alternatives`: its other candidate strategies (at most
    `kMaxAlternatives`, cheapest first), each a dictionary of `operands`
    and `results` layouts and `cost`, the microseconds (reshards plus
    local work) the whole function would gain if only that op changed:

    ```mlir
    %0 = linalg.matmul ... {shardx.alternatives = [
           {cost = 12.5 : f64, operands = [...], results = [...]}, ...],
         shardx.layouts = [...], shardx.operand_layouts = [...]}
    ```
  }];
  let options = [
    Option<"strategy", "strategy", "std::string", "\"greedy\"",
           "The search: `greedy` (program order, then whole-graph "
           "refinement)">,
    Option<"userLayoutsOnly", "user-layouts-only", "bool", "false",
           "Keep every value not constrained by the user replicated">,
    Option<"bandwidthOverride", "bandwidth", "double", "0",
           "Bytes per second of every mesh axis (0: the mesh's own hints)">,
    Option<"latencyOverride", "latency", "double", "-1",
           "Seconds per collective on every axis (negative: the mesh's own)">,
    Option<"refineGraph", "refine", "bool", "true",
           "After the pass in program order, change op strategies where "
           "that lowers the whole function's reshard cost">,
    Option<"computeRate", "compute-rate", "double", "1e12",
           "Loop iterations per second per rank: the refinement prices the "
           "work a strategy leaves unsharded against communication (0: "
           "communication only, less work breaking ties)">,
    Option<"printCost", "print-cost", "bool", "false",
           "Emit a remark per function with the total reshard cost before "
           "and after the whole-graph refinement">,
    Option<"recordAlternatives", "record-alternatives", "bool", "false",
           "Attach to each op the other strategies it had at the end, with "
           "what each would add to the function's cost "
           "(`shardx.alternatives`, read by the sharding report)">,
  ];
}

def AutoShardPass : Pass<"shardx-auto-shard", "ModuleOp"> {
  let summary = "chooses the layouts of every parameter, optimizer state and "
                "input of a train step under a per-rank memory budget";
  let description = [{
    For each function with no layouts in a module with one `shardx.mesh`
    (arguments or results already laid out are kept: a pinned plan), picks
    one layout per parameter group (a parameter, the optimizer state of its
    shape, its updated copies among the results) and one for the inputs'
    batch dim, to minimize the modeled step time (shardx-propagate's cost:
    reshards plus local compute) subject to the modeled peak memory per rank
    (docs/Memory.md, tensors level) <= `memory-budget`. Everything else is
    left to shardx-propagate, which the pass also runs to price each choice.
    The decision space, the per-choice time and memory numbers and the
    chosen plan can be written as JSON (`auto-json`); docs/Memory.md,
    "Automatic sharding under a budget", has the model and the solver.

    ```mlir
    // before: a traced train step and a mesh
    func.func @step(%w: tensor<64x32xf32>, %m: tensor<64x32xf32> {torch.state = "exp_avg"}, ...)
    // after: the plan, written as layouts users could have written
    func.func @step(%w: tensor<64x32xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}, ...)
    ```

    Under a budget a plan may fit by recomputing activations (`recompute`):
    where its peak does not fit without recomputation, its local program is
    priced again with `shardx-recompute-activations`' `selective`, then
    `aggressive` policy (the peak after the copies; the copies' loop
    iterations added to the time at `compute-rate`), and the fastest way
    that fits is the plan's price. The policy chosen is written on the
    function as `shardx.recompute = "selective"` (or `"aggressive"`), which
    shardx-compile applies when no `--recompute` is given.

    A remark per function lists the plan, its modeled step time and peak
    (and its recomputation). Where no plan fits, an error names the
    smallest peak found.
  }];
  let options = [
    Option<"memoryBudget", "memory-budget", "int64_t", "0",
           "Bytes per rank the modeled peak may reach (0: no limit)">,
    Option<"jsonPath", "auto-json", "std::string", "\"\"",
           "Write the decision space, its numbers and the plan to this file">,
    Option<"pairWindow", "pair-window", "unsigned", "3",
           "Price the interaction of each weight (a parameter of rank 2 or "
           "more) with this many weights used after it">,
    Option<"refineSweeps", "refine-sweeps", "unsigned", "1",
           "Sweeps of the final coordinate descent on real prices">,
    Option<"cutLayers", "cut-layers", "unsigned", "5",
           "From this many repeats of a tied layer (5 at least: the cuts "
           "keep 3 and 4), price plans on the step cut to 3 and 4 of them "
           "and extrapolate (0: always whole)">,
    Option<"bandwidthOverride", "bandwidth", "double", "0",
           "Bytes per second of every mesh axis (0: the mesh's own hints)">,
    Option<"latencyOverride", "latency", "double", "-1",
           "Seconds per collective on every axis (negative: the mesh's own)">,
    Option<"computeRate", "compute-rate", "double", "1e12",
           "Loop iterations per second per rank (as shardx-propagate)">,
    Option<"recompute", "recompute", "bool", "true",
           "Under a budget, let a plan fit by recomputing activations "
           "(selective, then aggressive), the copies' compute priced">,
  ];
}

def RaggedDispatchPass : Pass<"shardx-ragged-dispatch", "ModuleOp"> {
  let summary = "dispatches and combines the routed rows of a dropless MoE "
                "whose tokens are split over the experts' axes by ragged "
                "all-to-alls";
  let description = [{
    After `shardx-propagate` (of canonicalized IR, as in `shardx-spmd`),
    before `shardx-ragged-experts` and `shardx-insert-reshards`. Recognises the global dropless MoE
    dispatch (torchtitan's form, `shardx_dev.grouped_moe.GroupedMoEBlock`
    traced: the routed choices `flat [R]` sorted by a stable argsort, the
    groups counted by `bincount(flat)` and its cumulative sum, the tokens'
    rows gathered in that order, the SiLU-gated experts as grouped matmuls
    whose weights are split on E over mesh axes A, the rows weighted by
    their gates and added back to their tokens by `index_add`) where the
    tokens, their choices and gates are split on dim 0 over A (and maybe
    other axes); where the tokens do not divide over those axes, each
    rank's tokens and their choices and gates (read from their `[T, k]`
    forms) are padded to the most any rank holds, the padding's choices
    past every expert (never sent), and the output sliced back (the
    forward only). The sum over the routed items does not depend on their
    order, so each rank sorts its own tokens' choices, sends each member
    of its A group the rows of that member's experts by
    `shardx.ragged_all_to_all` (the counts from its local counts; the
    per-expert counts sent first by an even `shardx.all_to_all`, from which
    the received rows' experts and counts follow), sorts the received rows
    by expert (a worst-case buffer, every row of the group; the rows past
    the received ones zero, sorted last), runs its experts over them
    (shardx-localize then runs each grouped matmul over the received rows
    only), puts them back in the received order, sends them back with the
    counts it received (the combine, counts given), and adds them,
    weighted, to its own tokens.

    A train step's backward (`torch.autograd.grad` traced) is matched with
    its forward: the pass takes every op that reads the routed rows (the
    gathers by token or by the sort's order, row-wise generics, grouped
    matmuls of both forms, the `index_add`s back by token or by item) and
    builds each on the items' ranks or the experts' ranks, a value crossing
    by the dispatch or the combine at most once each way: the output
    gradient's rows go out as the tokens' did, the rows' gradients come
    back as the outputs did (four exchanges in a step), the gates'
    gradient is computed on the items' ranks from the combined outputs,
    and the experts' gradients stay on the experts' ranks, recorded as a
    partial sum over the items' axes outside A (a dp all-reduce follows).

    The global ops are replaced by the rank's local ops between
    `unrealized_conversion_cast`s (as lowered reshards are), so
    shardx-localize clones them as they are; the range checks of the
    replaced gathers' indices (a permutation's, in range by construction)
    become zeros. Where any part does not match, or a value of the rows is
    read by another op, the program is left as it is (its propagated plan
    runs). docs/Rules.md, "Expert parallelism".

    ```mlir
    // before: %flat [S(0)] -> [R] (all-gather), a global argsort on every
    //         rank, the gathered rows through the experts, all-reduced
    // after:  %send = local rows sorted by expert; %rows =
    //         shardx.ragged_all_to_all %send, %counts recv_counts = %rc;
    //         experts on %rows; %back = shardx.ragged_all_to_all %ys, %rc
    //         recv_counts = %counts; the local index_add: [S(0)]
    // backward: %gy = the output gradient's rows, sorted; %gr =
    //         shardx.ragged_all_to_all %gy, %counts recv_counts = %rc;
    //         the experts' gradients over %gr (local, [S(0)]); the rows'
    //         gradients back by shardx.ragged_all_to_all %dx, %rc
    //         recv_counts = %counts
    ```
  }];
}

def RaggedExpertsPass : Pass<"shardx-ragged-experts", "ModuleOp"> {
  let summary = "keeps the rows of grouped matmuls on the ranks of their "
                "experts instead of all-reducing them";
  let description = [{
    After `shardx-propagate`, before `shardx-insert-reshards`. A grouped
    matmul (the importer's `_grouped_mm`: `out[r, n] = sum_{e, k}
    select(g[r] == e, x[r, k] * w[e, k, n], 0)`, `g` the rows' groups
    counted from `offs`) whose experts' weights are split on E over mesh
    axes A computes, on each rank, row `r` exactly where `g[r]` is one of
    the rank's experts and zero elsewhere: a Partial(sum) over A whose
    terms do not overlap. Row-wise elementwise ops of such rows (the SiLU
    gate) are exact on those rows too, and a grouped matmul with the same
    groups and the same expert split reads only those rows. So the
    reshards between them (an all-reduce per value) are not needed: this
    pass finds each such region (every use of a value in it is a row-wise
    op in it or such a grouped matmul) and records its values as
    Partial(sum) over A (exact only on the rank's own rows, which is all
    that its consumers read), marking its ops `shardx.ragged_rows`. A
    region with a value read elsewhere is shrunk until none is; the
    grouped matmuls' own outputs, true partial sums, are reduced as before
    where something else reads them. docs/Rules.md, "Expert parallelism".

    ```mlir
    // before: %a = gmm(%x, %w1 [S(0)]) [P(sum)]; %s = silu(%a) reads [R]
    //         (an all-reduce of %a); %y = gmm(%s, %w2 [S(0)]) reads [R]
    // after:  %s = silu(%a) {shardx.ragged_rows} reads and is [P(sum)];
    //         %y reads %s as [P(sum)]: no all-reduce
    ```
  }];
}

def InsertReshardsPass : Pass<"shardx-insert-reshards", "ModuleOp"> {
  let summary = "inserts shardx.redistribute where an operand's layout is "
                "not the one its consumer needs";
  let description = [{
    Consumes `shardx.operand_layouts`: for each operand whose producer's
    layout differs, inserts one `shardx.redistribute` (shared by all
    consumers that need the same layout). Values that are only shapes or
    splats (`tensor.empty`, `linalg.fill` of one, splat constants) are
    rematerialized in the needed layout instead of moved. `shardx.annotate`
    ops become redistributes (or disappear when already satisfied), and
    function results get their final layouts.
  }];
}

def VerifyLayoutsPass : Pass<"shardx-verify-layouts", "ModuleOp"> {
  let summary = "checks that every op's operands have the layouts its "
                "strategy needs";
  let description = [{
    After `shardx-insert-reshards`: every tensor operand's layout equals the
    op's `shardx.operand_layouts` entry and every function result has its
    declared layout. A mismatch is an error at the op, never a silently wrong
    program.
  }];
}

//===----------------------------------------------------------------------===//
// Reshard lowering
//===----------------------------------------------------------------------===//

def LowerReshardsPass : Pass<"shardx-lower-reshards", "ModuleOp"> {
  let summary = "replaces each shardx.redistribute with its cheapest plan";
  let description = [{
    Plans every `shardx.redistribute` with the reshard planner (A* over
    canonical layouts, alpha-beta costs from the mesh's `bandwidth` and
    `latency` hints) and replaces it with the plan's collectives and local
    steps on per-rank local tensors. The local region is bracketed by
    `builtin.unrealized_conversion_cast` from and to the global type, which
    SPMD expansion (`shardx-localize`) removes. Local types are static where
    every rank's shard has the same size and dynamic elsewhere.

    ```mlir
    shardx.mesh @mesh(shape = 4)
    %y = shardx.redistribute %x : tensor<8x8xf32>
        from #shardx.layout<@mesh, [S(0)]> to #shardx.layout<@mesh, [S(1)]>
    ```
    becomes
    ```mlir
    %0 = builtin.unrealized_conversion_cast %x : tensor<8x8xf32> to tensor<2x8xf32>
    %1 = shardx.all_to_all %0 on @mesh axes = [0] split_dim = 1 concat_dim = 0
        : tensor<2x8xf32> -> tensor<8x2xf32>
    %y = builtin.unrealized_conversion_cast %1 : tensor<8x2xf32> to tensor<8x8xf32>
    ```

    A redistribute the planner cannot serve fails with
    `Cannot reshard: <src> -> <dst>: <reason>` at its location. A plan always
    ends in exactly the requested layout: a pending Partial is never dropped
    or silently turned into Replicate.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::tensor::TensorDialect"];
}

//===----------------------------------------------------------------------===//
// SPMD expansion
//===----------------------------------------------------------------------===//

def LocalizePass : Pass<"shardx-localize", "ModuleOp"> {
  let summary = "rewrites the global program into the program every rank runs";
  let description = [{
    After propagation, reshard insertion and reshard lowering: every tensor
    value takes its local type (the shard each rank holds), function
    signatures change accordingly, shape-carrying ops get local shapes
    (`tensor.empty`, `tensor.expand_shape`), `linalg.index` of a sharded
    loop gets the rank's offset (from `shardx.axis_index`), and the casts
    that bracket lowered reshards disappear.

    Calling convention: rank `(i, j, ...)` passes, for every argument, its
    local shard of the global tensor under the argument's layout (row-major,
    contiguous) and receives every result's local shard under the result's
    layout (a Partial result: this rank's term). The global types and
    layouts are kept in the function's `shardx.signature` attribute
    (`arg_types`, `arg_layouts`, `result_types`, `result_layouts`); no
    `shardx.layout`, `shardx.annotate` or `shardx.redistribute` remains.

    Uneven shards get dynamic local sizes (each rank's from
    `shardx.axis_index`). A sharded function with more than one block is
    an error; a program that cannot be expanded fails with an error naming
    the op.

    A grouped matmul (the importer's `_grouped_mm`) runs over the rows of
    the rank's experts only, a run-time count read on the host
    (docs/Rules.md, "Expert parallelism"); `grouped-row-runs=false` keeps
    it over every row (masked), for targets whose host cannot read device
    buffers (`shardx-compile --target=cuda`).
  }];
  let options = [
    Option<"groupedRowRuns", "grouped-row-runs", "bool", "true",
           "run grouped matmuls over their rank's experts' rows only (a "
           "count read on the host)">,
  ];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
}

def RingAttentionPass : Pass<"shardx-ring-attention", "ModuleOp"> {
  let summary = "runs attention over keys and values gathered along the "
                "sequence as ring attention";
  let description = [{
    On the local program, after `shardx-localize`. A `shardx.attention`
    whose keys and values are gathered along their sequence over one group
    (an even `shardx.all_gather`, or a `shardx.exchange` from a split over
    one mesh axis to the whole: an uneven split, its blocks padded with
    keys no query sees, by positions made up where it is not causal; through ops that act on each position
    alone: a repeat of the key/value heads, transposes, reshapes that keep
    the sequence a dim of its own, elementwise ops) becomes a ring: each rank
    starts from its own block of keys and values, receives the previous
    member's block n - 1 times (`shardx.permute`, member j to j + 1), runs
    the attention of its queries over each block (the key positions of a
    causal attention sliced to the block) and combines the blocks' outputs
    by their log-sum-exp (flash attention's online softmax). The
    `attention_dq` and `attention_dkv` of the same operands run as one ring
    of their own: dq sums its blocks' terms; dK and dV, brought through the
    ops between them and the reduce-scatters along the sequence that read
    them, are summed into accumulators that travel with the blocks and are
    sent once more to their owners. Each rank sends as many K and V bytes
    as the gather moves, one block more of dK and dV than the
    reduce-scatter, and holds two blocks of K and V at a time instead of
    the whole sequence's. Where a causal attention's positions are a
    constant (its queries' a `shardx.chunk` of it over the group: the
    zig-zag order of `shardx.context_parallel`), each step computes only
    the quarters (query half, key half) of its block that some rank's mask
    shows, as many calls as the rank that shows the most, each call's
    halves looked up by rank. A gather that an op which cannot ring reads
    stays, with every op reading it. An attention op (forward or backward)
    left over the gathered keys, with such positions, runs by the calls its
    mask shows too (the rank's queries in halves, the keys in pieces of the
    same size) where they are at most three quarters of its work: `2n + 1`
    of `4n` pieces in the zig-zag order. Anything else is left as it is.

    `min-bytes`: rings only where the gathered keys and values of the op
    take at least this many bytes per rank (-1: no ring).
    `piece-rows`: an attention op on one rank whose queries and keys are at
    the same known positions (a constant, or the iota `torch.arange` traces
    to: an unsharded causal attention) runs by the calls its mask shows
    over pieces of at least this many rows, at most 8 a side (the rows'
    order: 36 of 64 pieces); 0: whole.
  }];
  let options = [
    Option<"minBytes", "min-bytes", "int64_t", "0",
           "ring only where the gathered keys and values take at least this "
           "many bytes per rank (-1: no ring)">,
    Option<"pieceRows", "piece-rows", "int64_t", "128",
           "an attention on one rank at known positions runs in pieces of at "
           "least this many rows (0: whole)">,
  ];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::tensor::TensorDialect"];
}

def BucketCollectivesPass : Pass<"shardx-bucket-collectives", "ModuleOp"> {
  let summary = "merges small all-reduces into one over a packed buffer";
  let description = [{
    On the local program (after `shardx-localize`): all-reduces of the same
    mesh, axes, reduction and element type whose results are first used
    later are merged, like PyTorch DDP's gradient buckets, into one
    all-reduce of a flat buffer they are packed into (`tensor.insert_slice`)
    and unpacked from (`tensor.extract_slice`), placed right before the
    first use of any member's result. The alpha-beta cost model decides: a
    member joins a bucket when the latency of the mesh axes (`shardx.mesh`'s
    `latency`, default 5 us) exceeds the time of copying it in and out at
    `copy-bandwidth-gbps`, and a bucket is emitted only when it pays as a
    whole (k members save k - 1 latencies; the largest leave until it
    does); a bucket holds at most `max-bucket-bytes`. Tensors of dynamic
    (uneven) local shape or with an encoding stay alone. Each bucket formed
    is reported as a remark with `print-buckets`.

    ```mlir
    %a = shardx.all_reduce %x on @mesh axes = [0] reduction = sum : tensor<16xf32>
    %b = shardx.all_reduce %y on @mesh axes = [0] reduction = sum : tensor<16x32xf32>
    // becomes one all_reduce of tensor<528xf32> before the first use of %a or %b
    ```
  }];
  let options = [
    Option<"maxBucketBytes", "max-bucket-bytes", "int64_t",
           /*default=*/"25 * 1024 * 1024",
           "the most bytes one bucket holds (DDP's default: 25 MiB)">,
    Option<"copyBandwidthGBps", "copy-bandwidth-gbps", "double",
           /*default=*/"10.0",
           "local copy bandwidth of the cost model, GB/s">,
    Option<"printBuckets", "print-buckets", "bool", /*default=*/"false",
           "emit a remark per bucket formed">,
  ];
  let dependentDialects = ["::mlir::tensor::TensorDialect"];
}

def ScheduleCollectivesPass
    : Pass<"shardx-schedule-collectives", "ModuleOp"> {
  let summary = "splits collectives into start/wait and overlaps them with "
                "compute";
  let description = [{
    On the local program (after `shardx-bucket-collectives`): every
    `shardx.all_reduce`, `shardx.all_gather` and `shardx.reduce_scatter`
    becomes its start (`shardx.all_reduce_start`, `all_gather_start`,
    `reduce_scatter_start`) and a `shardx.wait`: DDP's gradient all-reduces,
    FSDP's prefetch of the next layer's weights and its reduce-scatter of
    gradients in backward. In each block, the wait moves down to just before the
    first op that reads its result, and the start (with the side-effect-free
    ops that compute its operand, e.g. a bucket's packing) moves up to just
    after its operand is computed, so that the compute in between runs
    while the data moves. The bytes of the collectives in flight (started,
    not yet waited for; each counts the larger of its operand and result)
    stay at most `max-bytes-in-flight`: a start that
    would exceed it first waits for the oldest collectives in flight (a
    single larger collective runs alone).

    ```mlir
    %g = linalg.matmul ...                      // gradient of layer 2
    %a = shardx.all_reduce %g ...
    %h = linalg.matmul ...                      // gradient of layer 1
    %u = arith.subf %w, %a ...
    // becomes
    %g = linalg.matmul ...
    %p = shardx.all_reduce_start %g ...
    %h = linalg.matmul ...                      // runs while %g moves
    %a = shardx.wait %p ...
    %u = arith.subf %w, %a ...
    ```

    With `print-schedule`, a remark per function gives the modeled
    communication time (alpha-beta costs of the mesh), the modeled exposed
    communication time (not overlapped by compute at `compute-rate`) before
    and after scheduling, and the collectives with their bytes.
  }];
  let options = [
    Option<"maxBytesInFlight", "max-bytes-in-flight", "int64_t",
           /*default=*/"256 * 1024 * 1024",
           "the most bytes of collectives started and not yet waited for">,
    Option<"computeRate", "compute-rate", "double", /*default=*/"1e9",
           "loop iterations per second per rank of the model that prices "
           "compute against communication (print-schedule)">,
    Option<"printSchedule", "print-schedule", "bool", /*default=*/"false",
           "emit a remark per function with its modeled communication and "
           "exposed communication before and after scheduling">,
  ];
}

def LowerHalosPass : Pass<"shardx-lower-halos", "ModuleOp"> {
  let summary = "lowers shardx.halo to neighbour permutes of its edge slices";
  let description = [{
    On the local program: every `shardx.halo` becomes the slices of its
    operand's edge rows, one `shardx.permute` per side with the
    non-cyclic neighbour pairs (`[j, j + 1]` for the low side, `[j + 1, j]`
    for the high side), and a `tensor.concat` of the received rows and the
    operand; the members at the ends of the group keep none of what they
    receive (`shardx.axis_index` picks the sizes). Every backend then runs
    a halo through its permute (threads, MPI, cuda-local, NCCL). The CPU
    and CUDA code generation run it before `shardx-convert-to-runtime`.

    ```mlir
    %y = shardx.halo %x on @mesh axes = [0] dim = 0 low = 1 high = 0
        : tensor<4x8xf32> -> tensor<?x8xf32>
    // becomes
    %t = tensor.extract_slice %x[3, 0] [1, 8] [1, 1]
    %p = shardx.permute %t on @mesh axes = [0] pairs = [[0, 1]] : tensor<1x8xf32>
    %j = shardx.axis_index on @mesh axes = [0] : index
    %n = arith.select (%j > 0), 1, 0
    %r = tensor.extract_slice %p[0, 0] [%n, 8] [1, 1]
    %y = tensor.concat dim(0) %r, %x
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::tensor::TensorDialect"];
}

//===----------------------------------------------------------------------===//
// Debugging passes
//===----------------------------------------------------------------------===//

def PrintPlanPass : Pass<"shardx-print-plan", "ModuleOp"> {
  let summary = "prints the reshard plan of every shardx.redistribute";
  let description = [{
    For each `shardx.redistribute`, emits a remark with the plan's steps,
    the layout after each step, the bytes each rank receives and the
    alpha-beta cost, e.g.

    ```
    remark: plan [S(0), S(0)] -> [S(0), R] for 16x8xf32: 1 step, 1 collective, 128 bytes/rank, 5.000 us
      all_gather(axes = [1], dim = 0) -> [S(0), R]: 128 bytes/rank, 5.000 us
    ```

    Write a small module with a mesh and one redistribute to plan any
    src/dst/shape/mesh. Fails like `shardx-lower-reshards` on bad input.

    After `shardx-ragged-experts`, a remark per operand that a grouped
    matmul reads with its rows kept on their experts' ranks (pending a sum
    over the experts' axes, no reshard):

    ```
    remark: ragged rows: grouped matmul reads operand #0 tensor<16x32xf32> as [P(sum)], its experts' rows on their ranks: no reshard
    ```

    On a local program (e.g. after `shardx-spmd`), a remark per function
    with collectives gives the schedule summary of
    `shardx-schedule-collectives` (the same as its `print-schedule`): the
    modeled communication time, the modeled exposed (not overlapped)
    communication before and after scheduling (the function as given, and a
    scheduled copy when it is not scheduled yet), and the started
    collectives with their bytes and buckets:

    ```
    remark: schedule of @step: 2 collectives (2 async), 10.008 us communication; exposed 10.008 us before, 9.752 us after scheduling
      all_reduce_start of 256 bytes
      all_reduce_start of 2180 bytes (bucket of 5)
    ```

    Per function of a local program (one with `shardx.signature`, a
    bufferized one, or any function of a module without a mesh), a remark
    with its per-rank memory (docs/Memory.md,
    `shardx/Analysis/MemoryModel.h`), in the order shardx-compile runs it
    (on the scheduled copy): the peak, the op where it is reached, the
    arguments by role and what the program has allocated at the peak:

    ```
    remark: memory of @step per rank: peak 1.52 MiB (1593344 bytes) at linalg.matmul loc(...) (op 57 of 120)
      arguments 1.00 MiB: parameters 512.00 KiB, optimizer state 512.00 KiB
      allocated at the peak 528.00 KiB (540672 bytes): activations 400.00 KiB, gradients 128.00 KiB
    ```
  }];
  let options = [
    Option<"maxBytesInFlight", "max-bytes-in-flight", "int64_t",
           /*default=*/"256 * 1024 * 1024",
           "the schedule's bound on the bytes of collectives in flight">,
    Option<"computeRate", "compute-rate", "double", /*default=*/"1e9",
           "loop iterations per second per rank of the schedule's model">,
    Option<"memoryJson", "memory-json", "std::string", /*default=*/"",
           "also write the memory profiles, a JSON array with one object per "
           "function (MemoryProfile::printJson), to this file">,
    Option<"memoryLevel", "memory-level", "std::string",
           /*default=*/"\"tensors\"",
           "tensors (model the local program) or buffers (replay the "
           "allocations of a copy through shardx-codegen-cpu's passes up to "
           "shardx-deallocate-buffers; docs/Memory.md)">,
  ];
}

#endif // SHARDX_DIALECT_SHARDX_TRANSFORMS_PASSES_TD
