"""A capacity-free (dropless) expert-parallel MoE forward as a local
(per-rank) ShardX program, for checking ``shardx.ragged_all_to_all``
against eager PyTorch.

The block is ``models.MoEBlock`` with ``capacity=None`` (the zoo's
Mixtral-style block: router, top-2 softmax gating renormalized over the
two, SiLU-gated experts): its eager forward drops no token, so it is the
reference. The program is what torchtitan's dropless MoE does on each
rank, written out: the tokens are split over every mesh axis (chunks of
``ceil(T / ranks)`` rows, the last ones shorter: uneven), the experts over
the ``ep`` axis (``ceil(experts / ep)`` per rank, fewer on the last ones
when ep does not divide them; the weights' slices picked by the rank's
``ep`` index; on a (dp, ep) mesh the dp groups each run their own
exchange). Each rank routes its tokens, counts the (token, choice)
items per destination rank and per expert, and places the items' rows in
a send buffer sorted by expert (so grouped by destination, and by local
expert within a destination's run, as torchtitan sorts them); it sends
each member its per-expert counts (``el`` int64s, an even
``shardx.all_to_all``), then the rows with ``shardx.ragged_all_to_all``
(the counts computed by the program and, summed from the per-expert
counts, the counts to receive given: no counts go with the rows; the
receive buffer holds the worst case, every item of the group on this
rank); a received row's local expert follows from the runs' counts. It
runs each local expert on the rows (rows of other experts masked; the
unused zero rows after the received ones count as local expert 0's and
give zeros, the experts having no bias: exact, the worst-case buffer's
compute), sends the rows back
with the received counts (receiving the counts it sent: given again), and
sums each token's two results with its gates. Three collectives per
forward (torchtitan's three), two per backward. The rows moved between ranks are the routed items' whose expert
lives on another rank, nothing else: the program returns their number.
With ``backward`` it is also the block's backward (the gradients of the
tokens, the router and the experts for a given output gradient).

This is a hand-built local program, not one propagation plans: the global
program of a dropless MoE has routing-dependent shapes, and the importer
and the planner do not produce this exchange (docs/Rules.md, "Expert
parallelism")."""

import math

import numpy as np
import torch


def placement(mesh_shape, experts):
    """(ranks, ep group size, experts per rank) of a mesh whose last axis
    is ``ep``: expert ``e`` lives on ep rank ``e // per_rank``,
    ``per_rank = ceil(experts / ep)``, so when ep does not divide the
    experts the last ranks hold fewer (7 on 4: 2, 2, 2, 1)."""
    ranks = int(np.prod(mesh_shape))
    ep = mesh_shape[-1]
    return ranks, ep, math.ceil(experts / ep)


def moved_rows(module, x, mesh_shape):
    """The (token, choice) items whose expert lives on another rank of the
    token's ep group: the rows each exchange moves, summed over ranks."""
    t = x.shape[0]
    ranks, ep, local = placement(mesh_shape, module.experts)
    rows = math.ceil(t / ranks)
    probs = torch.softmax(module.router(x), dim=-1)
    _, chosen = probs.topk(module.top_k, dim=-1)
    src = (torch.arange(t) // rows) % ep
    return int(((chosen // local) != src[:, None]).sum())


def local_program(tokens, dim, hidden, experts, mesh_shape, backward=False):
    """The MLIR of the dropless EP forward of ``models.MoEBlock`` on
    ``x [tokens, dim]`` for a mesh ``mesh_shape`` ((ep,) or (dp, ep)).
    Entry ``moe(x, router [E, D], w1, w3, w2)`` returns every rank's output
    rows gathered (``ranks * ceil(tokens / ranks)`` rows, the first
    ``tokens`` the block's output) and the rows moved between ranks.

    ``backward``: the entry also takes ``dy [tokens, dim]`` (the output's
    gradient) and returns the gradients of ``x``, the router and ``w1``,
    ``w3``, ``w2`` after those two (the experts' as ``[ep * per_rank,
    ...]``, the first ``experts`` real): the dispatch's transpose is the
    combine's exchange and the combine's the dispatch's (the same counts),
    each expert's gradient is all-reduced over dp, the router's over every
    rank."""
    k = 2
    n_all, n, el = placement(mesh_shape, experts)
    tl = math.ceil(tokens / n_all)
    q = tl * k          # items of this rank
    cap = q             # send buffer: every item
    rcap = n * q        # receive buffer: every item of the group
    t, d, h, e = tokens, dim, hidden, experts
    if len(mesh_shape) == 1:
        mesh = f'shardx.mesh @mesh(shape = {mesh_shape[0]}, axes = ["ep"])'
        all_axes, ep_axes = "[0]", "[0]"
    else:
        mesh = (f'shardx.mesh @mesh(shape = {mesh_shape[0]}x{mesh_shape[1]}, '
                'axes = ["dp", "ep"])')
        all_axes, ep_axes = "[0, 1]", "[1]"
    f32 = "f32"
    L = []
    a = L.append
    counter = [0]

    def fresh(p="v"):
        counter[0] += 1
        return f"%{p}{counter[0]}"

    def zeros(shape, elt=f32):
        e0, z = fresh("e"), fresh("z")
        ty = f"tensor<{'x'.join(map(str, shape))}x{elt}>" if shape else f"tensor<{elt}>"
        zero = "%zf" if elt == f32 else "%zi"
        a(f"  {e0} = tensor.empty() : {ty}")
        a(f"  {z} = linalg.fill ins({zero} : {elt}) outs({e0} : {ty}) -> {ty}")
        return z

    def ty(shape, elt=f32):
        return f"tensor<{'x'.join(map(str, shape))}x{elt}>" if shape else f"tensor<{elt}>"

    def mm(lhs, rhs, m, kk, nn, ta=False, tb=False):
        """lhs [m, kk] (or [kk, m] with ta) @ rhs [kk, nn] (or [nn, kk])."""
        out = fresh("mm")
        init = zeros([m, nn])
        lm = "(l, i)" if ta else "(i, l)"
        rm = "(j, l)" if tb else "(l, j)"
        ls = [kk, m] if ta else [m, kk]
        rs = [nn, kk] if tb else [kk, nn]
        a(f"  {out} = linalg.generic {{indexing_maps = [affine_map<(i, j, l) -> {lm}>, "
          f"affine_map<(i, j, l) -> {rm}>, affine_map<(i, j, l) -> (i, j)>], "
          f'iterator_types = ["parallel", "parallel", "reduction"]}} '
          f"ins({lhs}, {rhs} : {ty(ls)}, {ty(rs)}) outs({init} : {ty([m, nn])}) {{")
        a("  ^bb0(%p: f32, %r: f32, %acc: f32):")
        a("    %pr = arith.mulf %p, %r : f32")
        a("    %s = arith.addf %acc, %pr : f32")
        a("    linalg.yield %s : f32")
        a(f"  }} -> {ty([m, nn])}")
        return out

    def rank_rows(name, src, empty):
        """``name`` [tl, d]: this rank's rows of ``src`` [t, d], zero rows
        past its end."""
        a(f"  {empty} = tensor.empty() : {ty([tl, d])}")
        a(f"  {name} = linalg.generic {{indexing_maps = [affine_map<(i, j) -> (i, j)>], "
          f'iterator_types = ["parallel", "parallel"]}} outs({empty} : {ty([tl, d])}) {{')
        a("  ^bb0(%o: f32):")
        a("    %i = linalg.index 0 : index")
        a("    %j = linalg.index 1 : index")
        a("    %row = arith.addi %off, %i : index")
        a("    %in = arith.cmpi ult, %row, %T : index")
        a("    %rc = arith.select %in, %row, %c0 : index")
        a(f"    %v = tensor.extract {src}[%rc, %j] : {ty([t, d])}")
        a("    %y = arith.select %in, %v, %zf : f32")
        a("    linalg.yield %y : f32")
        a(f"  }} -> {ty([tl, d])}")

    def ew(shape, ins, body, elt=f32):
        """An elementwise generic over ``shape``: ``ins`` are (value, its
        shape, its map's results, its element type); the body reads them
        as %a0, %a1, ... and yields %res."""
        out = fresh("ew")
        dims = ", ".join(f"d{i}" for i in range(len(shape)))
        ident = f"affine_map<({dims}) -> ({dims})>"
        maps = [f"affine_map<({dims}) -> ({m})>" for _, _, m, _ in ins] + [ident]
        a(f"  {out}e = tensor.empty() : {ty(shape, elt)}")
        par = ", ".join(['"parallel"'] * len(shape))
        a(f"  {out} = linalg.generic {{indexing_maps = [{', '.join(maps)}], "
          f"iterator_types = [{par}]}} "
          f"ins({', '.join(v for v, _, _, _ in ins)} : "
          f"{', '.join(ty(sh, el_) for _, sh, _, el_ in ins)}) outs({out}e : {ty(shape, elt)}) {{")
        args = ", ".join(f"%a{i}: {el_}" for i, (_, _, _, el_) in enumerate(ins))
        a(f"  ^bb0({args}, %o: {elt}):")
        for line in body:
            a("    " + line)
        a(f"    linalg.yield %res : {elt}")
        a(f"  }} -> {ty(shape, elt)}")
        return out

    a(mesh)
    grads = ""
    if backward:
        grads = (f", {ty([n_all * tl, d])}, {ty([e, d])}, {ty([n * el, d, h])}, "
                 f"{ty([n * el, d, h])}, {ty([n * el, h, d])}")
    dyarg = f", %dy: {ty([t, d])}" if backward else ""
    a(f"func.func @moe(%x: {ty([t, d])}, %wr: {ty([e, d])}, %w1: {ty([e, d, h])}, "
      f"%w3: {ty([e, d, h])}, %w2: {ty([e, h, d])}{dyarg}) "
      f"-> ({ty([n_all * tl, d])}, {ty([])}{grads}) {{")
    a("  %zf = arith.constant 0.0 : f32")
    a("  %zi = arith.constant 0 : i64")
    a("  %one = arith.constant 1.0 : f32")
    a("  %ninf = arith.constant 0xFF800000 : f32")
    a("  %c0 = arith.constant 0 : index")
    a(f"  %T = arith.constant {t} : index")
    a(f"  %TL = arith.constant {tl} : index")
    a(f"  %EL = arith.constant {el} : i64")
    a(f"  %g = shardx.axis_index on @mesh axes = {all_axes} : index")
    a(f"  %me = shardx.axis_index on @mesh axes = {ep_axes} : index")
    a("  %off = arith.muli %g, %TL : index")
    # This rank's tokens, zero rows past the end.
    rank_rows("%xl", "%x", "%xe")
    # Router logits [tl, e] = xl @ wr^T.
    a(f"  %lz = tensor.empty() : {ty([tl, e])}")
    a(f"  %lfill = linalg.fill ins(%zf : f32) outs(%lz : {ty([tl, e])}) -> {ty([tl, e])}")
    a(f"  %logits = linalg.generic {{indexing_maps = [affine_map<(i, j, l) -> (i, l)>, "
      f"affine_map<(i, j, l) -> (j, l)>, affine_map<(i, j, l) -> (i, j)>], "
      f'iterator_types = ["parallel", "parallel", "reduction"]}} '
      f"ins(%xl, %wr : {ty([tl, d])}, {ty([e, d])}) outs(%lfill : {ty([tl, e])}) {{")
    a("  ^bb0(%p: f32, %r: f32, %acc: f32):")
    a("    %pr = arith.mulf %p, %r : f32")
    a("    %s = arith.addf %acc, %pr : f32")
    a("    linalg.yield %s : f32")
    a(f"  }} -> {ty([tl, e])}")
    # Top-2: the largest logit and its expert, then the largest of the others.
    for pick, excl in (("1", None), ("2", "%i1")):
        a(f"  %me{pick}0 = tensor.empty() : {ty([tl])}")
        a(f"  %mf{pick} = linalg.fill ins(%ninf : f32) outs(%me{pick}0 : {ty([tl])}) -> {ty([tl])}")
        a(f"  %ie{pick}0 = tensor.empty() : {ty([tl], 'i64')}")
        a(f"  %if{pick} = linalg.fill ins(%zi : i64) outs(%ie{pick}0 : {ty([tl], 'i64')}) -> {ty([tl], 'i64')}")
        ins = f"ins(%logits, {excl} : {ty([tl, e])}, {ty([tl], 'i64')}) " if excl else f"ins(%logits : {ty([tl, e])}) "
        maps = "affine_map<(i, j) -> (i, j)>, " + ("affine_map<(i, j) -> (i)>, " if excl else "")
        a(f"  %m{pick}, %i{pick} = linalg.generic {{indexing_maps = [{maps}affine_map<(i, j) -> (i)>, "
          f'affine_map<(i, j) -> (i)>], iterator_types = ["parallel", "reduction"]}} '
          f"{ins}outs(%mf{pick}, %if{pick} : {ty([tl])}, {ty([tl], 'i64')}) {{")
        a(f"  ^bb0(%l: f32, {'%ex: i64, ' if excl else ''}%am: f32, %ai: i64):")
        a("    %j = linalg.index 1 : index")
        a("    %ji = arith.index_cast %j : index to i64")
        a("    %gt = arith.cmpf ogt, %l, %am : f32")
        take = "%gt"
        if excl:
            a("    %ok = arith.cmpi ne, %ji, %ex : i64")
            a("    %take = arith.andi %gt, %ok : i1")
            take = "%take"
        a(f"    %nm = arith.select {take}, %l, %am : f32")
        a(f"    %ni = arith.select {take}, %ji, %ai : i64")
        a("    linalg.yield %nm, %ni : f32, i64")
        a(f"  }} -> ({ty([tl])}, {ty([tl], 'i64')})")
    # Items (token, choice): expert, gate, whether the token exists.
    a(f"  %ie = tensor.empty() : {ty([tl, k], 'i64')}")
    a(f"  %ge = tensor.empty() : {ty([tl, k])}")
    a(f"  %ve = tensor.empty() : {ty([tl, k], 'i64')}")
    a(f"  %ex2, %gate, %val2 = linalg.generic {{indexing_maps = [affine_map<(i, s) -> (i)>, "
      f"affine_map<(i, s) -> (i)>, affine_map<(i, s) -> (i)>, affine_map<(i, s) -> (i)>, "
      f"affine_map<(i, s) -> (i, s)>, affine_map<(i, s) -> (i, s)>, affine_map<(i, s) -> (i, s)>], "
      f'iterator_types = ["parallel", "parallel"]}} '
      f"ins(%m1, %i1, %m2, %i2 : {ty([tl])}, {ty([tl], 'i64')}, {ty([tl])}, {ty([tl], 'i64')}) "
      f"outs(%ie, %ge, %ve : {ty([tl, k], 'i64')}, {ty([tl, k])}, {ty([tl, k], 'i64')}) {{")
    a("  ^bb0(%a1: f32, %b1: i64, %a2: f32, %b2: i64, %o1: i64, %o2: f32, %o3: i64):")
    a("    %i = linalg.index 0 : index")
    a("    %s = linalg.index 1 : index")
    a("    %first = arith.cmpi eq, %s, %c0 : index")
    a("    %ex = arith.select %first, %b1, %b2 : i64")
    # Mixtral's gates: softmax, top-2, renormalized = 1 / (1 + e^(l2 - l1)).
    a("    %dl = arith.subf %a2, %a1 : f32")
    a("    %q = math.exp %dl : f32")
    a("    %den = arith.addf %one, %q : f32")
    a("    %num = arith.select %first, %one, %q : f32")
    a("    %gv = arith.divf %num, %den : f32")
    a("    %row = arith.addi %off, %i : index")
    a("    %in = arith.cmpi ult, %row, %T : index")
    a("    %vi = arith.extui %in : i1 to i64")
    a("    linalg.yield %ex, %gv, %vi : i64, f32, i64")
    a(f"  }} -> ({ty([tl, k], 'i64')}, {ty([tl, k])}, {ty([tl, k], 'i64')})")
    a(f"  %exq = tensor.collapse_shape %ex2 [[0, 1]] : {ty([tl, k], 'i64')} into {ty([q], 'i64')}")
    a(f"  %val = tensor.collapse_shape %val2 [[0, 1]] : {ty([tl, k], 'i64')} into {ty([q], 'i64')}")
    # Destination rank and local expert of each item.
    a(f"  %de = tensor.empty() : {ty([q], 'i64')}")
    a(f"  %le = tensor.empty() : {ty([q])}")
    a(f"  %dest, %lidf = linalg.generic {{indexing_maps = [affine_map<(i) -> (i)>, "
      f"affine_map<(i) -> (i)>, affine_map<(i) -> (i)>], iterator_types = [\"parallel\"]}} "
      f"ins(%exq : {ty([q], 'i64')}) outs(%de, %le : {ty([q], 'i64')}, {ty([q])}) {{")
    a("  ^bb0(%v: i64, %o1: i64, %o2: f32):")
    a("    %r = arith.divui %v, %EL : i64")
    a("    %rl = arith.muli %r, %EL : i64")
    a("    %l = arith.subi %v, %rl : i64")
    a("    %lf = arith.sitofp %l : i64 to f32")
    a("    linalg.yield %r, %lf : i64, f32")
    a(f"  }} -> ({ty([q], 'i64')}, {ty([q])})")
    # counts[j]: the items for rank j (the routing's, computed here).
    cz = zeros([n], "i64")
    a(f"  %counts = linalg.generic {{indexing_maps = [affine_map<(j, i) -> (i)>, "
      f"affine_map<(j, i) -> (i)>, affine_map<(j, i) -> (j)>], "
      f'iterator_types = ["parallel", "reduction"]}} '
      f"ins(%dest, %val : {ty([q], 'i64')}, {ty([q], 'i64')}) outs({cz} : {ty([n], 'i64')}) {{")
    a("  ^bb0(%dv: i64, %vv: i64, %acc: i64):")
    a("    %j = linalg.index 0 : index")
    a("    %ji = arith.index_cast %j : index to i64")
    a("    %hit = arith.cmpi eq, %dv, %ji : i64")
    a("    %hi = arith.extui %hit : i1 to i64")
    a("    %c = arith.muli %hi, %vv : i64")
    a("    %s = arith.addi %acc, %c : i64")
    a("    linalg.yield %s : i64")
    a(f"  }} -> {ty([n], 'i64')}")
    # pos[i]: the items before it in expert order (expert, then item
    # index): grouped by destination rank, and by local expert within
    # each destination's run, as torchtitan sorts them.
    pz = zeros([q], "i64")
    a(f"  %pos = linalg.generic {{indexing_maps = [affine_map<(i, j) -> (i)>, "
      f"affine_map<(i, j) -> (j)>, affine_map<(i, j) -> (j)>, affine_map<(i, j) -> (i)>], "
      f'iterator_types = ["parallel", "reduction"]}} '
      f"ins(%exq, %exq, %val : {ty([q], 'i64')}, {ty([q], 'i64')}, {ty([q], 'i64')}) "
      f"outs({pz} : {ty([q], 'i64')}) {{")
    a("  ^bb0(%ei: i64, %ej: i64, %vj: i64, %acc: i64):")
    a("    %i = linalg.index 0 : index")
    a("    %j = linalg.index 1 : index")
    a("    %lt = arith.cmpi ult, %j, %i : index")
    a("    %same = arith.cmpi eq, %ei, %ej : i64")
    a("    %tie = arith.andi %lt, %same : i1")
    a("    %less = arith.cmpi ult, %ej, %ei : i64")
    a("    %both = arith.ori %less, %tie : i1")
    a("    %bi = arith.extui %both : i1 to i64")
    a("    %c = arith.muli %bi, %vj : i64")
    a("    %s = arith.addi %acc, %c : i64")
    a("    linalg.yield %s : i64")
    a(f"  }} -> {ty([q], 'i64')}")
    # Items per expert slot (ep rank, local expert), for the receivers to
    # tell the experts' runs apart: sent as counts, not per row.
    ez = zeros([n * el], "i64")
    a(f"  %ecounts = linalg.generic {{indexing_maps = [affine_map<(f, i) -> (i)>, "
      f"affine_map<(f, i) -> (i)>, affine_map<(f, i) -> (f)>], "
      f'iterator_types = ["parallel", "reduction"]}} '
      f"ins(%exq, %val : {ty([q], 'i64')}, {ty([q], 'i64')}) outs({ez} : {ty([n * el], 'i64')}) {{")
    a("  ^bb0(%ev: i64, %vv: i64, %acc: i64):")
    a("    %f = linalg.index 0 : index")
    a("    %fi = arith.index_cast %f : index to i64")
    a("    %hit = arith.cmpi eq, %ev, %fi : i64")
    a("    %hi = arith.extui %hit : i1 to i64")
    a("    %c = arith.muli %hi, %vv : i64")
    a("    %s = arith.addi %acc, %c : i64")
    a("    linalg.yield %s : i64")
    a(f"  }} -> {ty([n * el], 'i64')}")
    # place[i, p] = 1 where item i goes to send row p.
    a(f"  %pe = tensor.empty() : {ty([q, cap])}")
    a(f"  %place = linalg.generic {{indexing_maps = [affine_map<(i, p) -> (i)>, "
      f"affine_map<(i, p) -> (i)>, affine_map<(i, p) -> (i, p)>], "
      f'iterator_types = ["parallel", "parallel"]}} '
      f"ins(%pos, %val : {ty([q], 'i64')}, {ty([q], 'i64')}) outs(%pe : {ty([q, cap])}) {{")
    a("  ^bb0(%pv: i64, %vv: i64, %o: f32):")
    a("    %p = linalg.index 1 : index")
    a("    %pi = arith.index_cast %p : index to i64")
    a("    %at = arith.cmpi eq, %pv, %pi : i64")
    a("    %v1 = arith.cmpi ne, %vv, %zi : i64")
    a("    %b = arith.andi %at, %v1 : i1")
    a("    %f = arith.uitofp %b : i1 to f32")
    a("    linalg.yield %f : f32")
    a(f"  }} -> {ty([q, cap])}")
    # Item rows: the token's row.
    a(f"  %xbe = tensor.empty() : {ty([tl, k, d])}")
    a(f"  %xb = linalg.generic {{indexing_maps = [affine_map<(i, s, c) -> (i, c)>, "
      f"affine_map<(i, s, c) -> (i, s, c)>], iterator_types = [\"parallel\", \"parallel\", \"parallel\"]}} "
      f"ins(%xl : {ty([tl, d])}) outs(%xbe : {ty([tl, k, d])}) {{")
    a("  ^bb0(%v: f32, %o: f32):")
    a("    linalg.yield %v : f32")
    a(f"  }} -> {ty([tl, k, d])}")
    a(f"  %xq = tensor.collapse_shape %xb [[0, 1], [2]] : {ty([tl, k, d])} into {ty([q, d])}")
    # send[p, :] = sum_i place[i, p] xq[i, :] (one term each: exact).
    sz = zeros([cap, d])
    a(f"  %send = linalg.generic {{indexing_maps = [affine_map<(p, c, i) -> (i, p)>, "
      f"affine_map<(p, c, i) -> (i, c)>, affine_map<(p, c, i) -> (p, c)>], "
      f'iterator_types = ["parallel", "parallel", "reduction"]}} '
      f"ins(%place, %xq : {ty([q, cap])}, {ty([q, d])}) outs({sz} : {ty([cap, d])}) {{")
    a("  ^bb0(%p: f32, %r: f32, %acc: f32):")
    a("    %pr = arith.mulf %p, %r : f32")
    a("    %s = arith.addf %acc, %pr : f32")
    a("    linalg.yield %s : f32")
    a(f"  }} -> {ty([cap, d])}")
    # Dispatch: each member's per-expert counts for this rank (one row of
    # el counts from each member, an even all-to-all), then the rows: the
    # rows from member j are its counts' sum, so the rows' exchange is
    # given them (no counts exchanged with the rows).
    a(f"  %ec2 = tensor.expand_shape %ecounts [[0, 1]] output_shape [{n}, {el}] : {ty([n * el], 'i64')} into {ty([n, el], 'i64')}")
    a(f"  %erecv2 = shardx.all_to_all %ec2 on @mesh axes = {ep_axes} split_dim = 0 concat_dim = 0 "
      f": {ty([n, el], 'i64')} -> {ty([n, el], 'i64')}")
    a(f"  %erecv = tensor.collapse_shape %erecv2 [[0, 1]] : {ty([n, el], 'i64')} into {ty([n * el], 'i64')}")
    rz = zeros([n], "i64")
    a(f"  %rcounts = linalg.generic {{indexing_maps = [affine_map<(j, f) -> (j, f)>, "
      f"affine_map<(j, f) -> (j)>], iterator_types = [\"parallel\", \"reduction\"]}} "
      f"ins(%erecv2 : {ty([n, el], 'i64')}) outs({rz} : {ty([n], 'i64')}) {{")
    a("  ^bb0(%cv: i64, %acc: i64):")
    a("    %s = arith.addi %acc, %cv : i64")
    a("    linalg.yield %s : i64")
    a(f"  }} -> {ty([n], 'i64')}")
    a(f"  %rows = shardx.ragged_all_to_all %send, %counts recv_counts = %rcounts on @mesh axes = {ep_axes} "
      f": {ty([cap, d])}, {ty([n], 'i64')}, {ty([n], 'i64')} -> {ty([rcap, d])}")
    # The received rows come in runs (member, local expert): run f starts
    # at the sum of the runs before it; a row's local expert is its run's.
    bz = zeros([n * el], "i64")
    a(f"  %rstart = linalg.generic {{indexing_maps = [affine_map<(f, g) -> (g)>, "
      f"affine_map<(f, g) -> (f)>], iterator_types = [\"parallel\", \"reduction\"]}} "
      f"ins(%erecv : {ty([n * el], 'i64')}) outs({bz} : {ty([n * el], 'i64')}) {{")
    a("  ^bb0(%cg: i64, %acc: i64):")
    a("    %f = linalg.index 0 : index")
    a("    %gi = linalg.index 1 : index")
    a("    %lt = arith.cmpi ult, %gi, %f : index")
    a("    %c = arith.select %lt, %cg, %zi : i64")
    a("    %s = arith.addi %acc, %c : i64")
    a("    linalg.yield %s : i64")
    a(f"  }} -> {ty([n * el], 'i64')}")
    iz = zeros([rcap])
    a(f"  %eid = linalg.generic {{indexing_maps = [affine_map<(r, f) -> (f)>, "
      f"affine_map<(r, f) -> (f)>, affine_map<(r, f) -> (r)>], "
      f'iterator_types = ["parallel", "reduction"]}} '
      f"ins(%rstart, %erecv : {ty([n * el], 'i64')}, {ty([n * el], 'i64')}) outs({iz} : {ty([rcap])}) {{")
    a("  ^bb0(%b: i64, %cnt: i64, %acc: f32):")
    a("    %r = linalg.index 0 : index")
    a("    %f = linalg.index 1 : index")
    a("    %ri = arith.index_cast %r : index to i64")
    a("    %fi = arith.index_cast %f : index to i64")
    a("    %end = arith.addi %b, %cnt : i64")
    a("    %geq = arith.cmpi uge, %ri, %b : i64")
    a("    %lt = arith.cmpi ult, %ri, %end : i64")
    a("    %in = arith.andi %geq, %lt : i1")
    a("    %lx = arith.remui %fi, %EL : i64")
    a("    %xf = arith.sitofp %lx : i64 to f32")
    a("    %v = arith.select %in, %xf, %zf : f32")
    a("    %s = arith.addf %acc, %v : f32")
    a("    linalg.yield %s : f32")
    a(f"  }} -> {ty([rcap])}")
    acc = zeros([rcap, d])
    saved = []
    # This rank's first expert; a slot past the last expert (uneven
    # placement) reads the last expert's weights: no row names it, so its
    # output is masked away.
    a(f"  %cel = arith.constant {el} : index")
    a(f"  %cl = arith.constant {e - 1} : index")
    a("  %gb = arith.muli %me, %cel : index")
    for x_e in range(el):
        a(f"  %ce{x_e} = arith.constant {x_e} : index")
        a(f"  %gu{x_e} = arith.addi %gb, %ce{x_e} : index")
        a(f"  %ge{x_e} = arith.minui %gu{x_e}, %cl : index")
        ws = {}
        for name, shp in (("w1", [d, h]), ("w3", [d, h]), ("w2", [h, d])):
            s3 = fresh("s")
            s2 = fresh("s")
            a(f"  {s3} = tensor.extract_slice %{name}[%ge{x_e}, 0, 0] [1, {shp[0]}, {shp[1]}] [1, 1, 1] "
              f": {ty([e] + shp)} to {ty([1] + shp)}")
            a(f"  {s2} = tensor.collapse_shape {s3} [[0, 1], [2]] : {ty([1] + shp)} into {ty(shp)}")
            ws[name] = s2
        h1 = mm("%rows", ws["w1"], rcap, d, h)
        h3 = mm("%rows", ws["w3"], rcap, d, h)
        hh = fresh("h")
        a(f"  {hh}e = tensor.empty() : {ty([rcap, h])}")
        a(f"  {hh} = linalg.generic {{indexing_maps = [affine_map<(i, j) -> (i, j)>, "
          f"affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>], "
          f'iterator_types = ["parallel", "parallel"]}} '
          f"ins({h1}, {h3} : {ty([rcap, h])}, {ty([rcap, h])}) outs({hh}e : {ty([rcap, h])}) {{")
        a("  ^bb0(%u: f32, %v: f32, %o: f32):")
        a("    %nu = arith.negf %u : f32")
        a("    %ex = math.exp %nu : f32")
        a("    %den = arith.addf %one, %ex : f32")
        a("    %sg = arith.divf %u, %den : f32")
        a("    %y = arith.mulf %sg, %v : f32")
        a("    linalg.yield %y : f32")
        a(f"  }} -> {ty([rcap, h])}")
        o = mm(hh, ws["w2"], rcap, h, d)
        saved.append((ws, h1, h3, hh))
        nacc = fresh("acc")
        a(f"  %cf{x_e} = arith.constant {float(x_e)} : f32")
        a(f"  {nacc} = linalg.generic {{indexing_maps = [affine_map<(i, j) -> (i, j)>, "
          f"affine_map<(i, j) -> (i)>, affine_map<(i, j) -> (i, j)>], "
          f'iterator_types = ["parallel", "parallel"]}} '
          f"ins({o}, %eid : {ty([rcap, d])}, {ty([rcap])}) outs({acc} : {ty([rcap, d])}) {{")
        a("  ^bb0(%v: f32, %id: f32, %o: f32):")
        a(f"    %mine = arith.cmpf oeq, %id, %cf{x_e} : f32")
        a("    %add = arith.select %mine, %v, %zf : f32")
        a("    %s = arith.addf %o, %add : f32")
        a("    linalg.yield %s : f32")
        a(f"  }} -> {ty([rcap, d])}")
        acc = nacc
    # Combine: every row back to its sender, in the order it was sent; this
    # rank receives the counts it sent.
    a(f"  %back = shardx.ragged_all_to_all {acc}, %rcounts recv_counts = %counts on @mesh axes = {ep_axes} "
      f": {ty([rcap, d])}, {ty([n], 'i64')}, {ty([n], 'i64')} -> {ty([cap, d])}")
    # Per item: its row back (place again), then the gates' sum per token.
    yz = zeros([q, d])
    a(f"  %yq = linalg.generic {{indexing_maps = [affine_map<(i, c, p) -> (i, p)>, "
      f"affine_map<(i, c, p) -> (p, c)>, affine_map<(i, c, p) -> (i, c)>], "
      f'iterator_types = ["parallel", "parallel", "reduction"]}} '
      f"ins(%place, %back : {ty([q, cap])}, {ty([cap, d])}) outs({yz} : {ty([q, d])}) {{")
    a("  ^bb0(%p: f32, %r: f32, %acc: f32):")
    a("    %pr = arith.mulf %p, %r : f32")
    a("    %s = arith.addf %acc, %pr : f32")
    a("    linalg.yield %s : f32")
    a(f"  }} -> {ty([q, d])}")
    a(f"  %yq3 = tensor.expand_shape %yq [[0, 1], [2]] output_shape [{tl}, {k}, {d}] : {ty([q, d])} into {ty([tl, k, d])}")
    tz = zeros([tl, d])
    a(f"  %ytok = linalg.generic {{indexing_maps = [affine_map<(i, c, s) -> (i, s, c)>, "
      f"affine_map<(i, c, s) -> (i, s)>, affine_map<(i, c, s) -> (i, c)>], "
      f'iterator_types = ["parallel", "parallel", "reduction"]}} '
      f"ins(%yq3, %gate : {ty([tl, k, d])}, {ty([tl, k])}) outs({tz} : {ty([tl, d])}) {{")
    a("  ^bb0(%v: f32, %gv: f32, %acc: f32):")
    a("    %pr = arith.mulf %v, %gv : f32")
    a("    %s = arith.addf %acc, %pr : f32")
    a("    linalg.yield %s : f32")
    a(f"  }} -> {ty([tl, d])}")
    a(f"  %yall = shardx.all_gather %ytok on @mesh axes = {all_axes} dim = 0 : {ty([tl, d])} -> {ty([n_all * tl, d])}")
    # Rows this rank sends to other ranks (the dispatch's; the combine's
    # are the same rows back).
    mz = zeros([])
    a(f"  %moved = linalg.generic {{indexing_maps = [affine_map<(j) -> (j)>, affine_map<(j) -> ()>], "
      f'iterator_types = ["reduction"]}} ins(%counts : {ty([n], "i64")}) outs({mz} : {ty([])}) {{')
    a("  ^bb0(%cv: i64, %acc: f32):")
    a("    %j = linalg.index 0 : index")
    a("    %other = arith.cmpi ne, %j, %me : index")
    a("    %c = arith.select %other, %cv, %zi : i64")
    a("    %cf = arith.sitofp %c : i64 to f32")
    a("    %s = arith.addf %acc, %cf : f32")
    a("    linalg.yield %s : f32")
    a(f"  }} -> {ty([])}")
    a(f"  %movedall = shardx.all_reduce %moved on @mesh axes = {all_axes} reduction = sum : {ty([])}")
    if not backward:
        a(f"  return %yall, %movedall : {ty([n_all * tl, d])}, {ty([])}")
        a("}")
        return "\n".join(L) + "\n"
    # --- Backward. This rank's rows of dy.
    rank_rows("%dyl", "%dy", "%dye")
    # Each item's output gradient (gate x dy) and each gate's (yq . dy).
    dyq3 = ew([tl, k, d], [("%gate", [tl, k], "d0, d1", f32), ("%dyl", [tl, d], "d0, d2", f32)],
              ["%res = arith.mulf %a0, %a1 : f32"])
    a(f"  %dyq = tensor.collapse_shape {dyq3} [[0, 1], [2]] : {ty([tl, k, d])} into {ty([q, d])}")
    gz = zeros([tl, k])
    a(f"  %dgate = linalg.generic {{indexing_maps = [affine_map<(i, s, c) -> (i, s, c)>, "
      f"affine_map<(i, s, c) -> (i, c)>, affine_map<(i, s, c) -> (i, s)>], "
      f'iterator_types = ["parallel", "parallel", "reduction"]}} '
      f"ins(%yq3, %dyl : {ty([tl, k, d])}, {ty([tl, d])}) outs({gz} : {ty([tl, k])}) {{")
    a("  ^bb0(%v: f32, %gd: f32, %acc: f32):")
    a("    %pr = arith.mulf %v, %gd : f32")
    a("    %s = arith.addf %acc, %pr : f32")
    a("    linalg.yield %s : f32")
    a(f"  }} -> {ty([tl, k])}")
    # The combine's transpose: the rows' gradients to the experts' ranks,
    # with the dispatch's counts (the rows land where they did forward).
    dback = mm("%place", "%dyq", cap, q, d, ta=True)
    a(f"  %dout = shardx.ragged_all_to_all {dback}, %counts recv_counts = %rcounts on @mesh axes = {ep_axes} "
      f": {ty([cap, d])}, {ty([n], 'i64')}, {ty([n], 'i64')} -> {ty([rcap, d])}")
    drows = zeros([rcap, d])
    dws = {"w1": [], "w3": [], "w2": []}
    for x_e, (ws, h1, h3, hh) in enumerate(saved):
        do = ew([rcap, d], [("%dout", [rcap, d], "d0, d1", f32), ("%eid", [rcap], "d0", f32)],
                [f"%m = arith.cmpf oeq, %a1, %cf{x_e} : f32",
                 "%res = arith.select %m, %a0, %zf : f32"])
        dws["w2"].append(mm(hh, do, h, rcap, d, ta=True))
        dh = mm(do, ws["w2"], rcap, d, h, tb=True)
        db = ew([rcap, h], [(dh, [rcap, h], "d0, d1", f32), (h1, [rcap, h], "d0, d1", f32)],
                ["%n = arith.negf %a1 : f32", "%ex1 = math.exp %n : f32",
                 "%den = arith.addf %one, %ex1 : f32", "%sg = arith.divf %a1, %den : f32",
                 "%res = arith.mulf %a0, %sg : f32"])
        # silu'(a) = s(a) (1 + a (1 - s(a)))
        da = ew([rcap, h], [(dh, [rcap, h], "d0, d1", f32), (h1, [rcap, h], "d0, d1", f32),
                            (h3, [rcap, h], "d0, d1", f32)],
                ["%n = arith.negf %a1 : f32", "%ex1 = math.exp %n : f32",
                 "%den = arith.addf %one, %ex1 : f32", "%sig = arith.divf %one, %den : f32",
                 "%oms = arith.subf %one, %sig : f32", "%aoms = arith.mulf %a1, %oms : f32",
                 "%t1 = arith.addf %one, %aoms : f32", "%ds = arith.mulf %sig, %t1 : f32",
                 "%gp = arith.mulf %a0, %a2 : f32", "%res = arith.mulf %gp, %ds : f32"])
        dws["w1"].append(mm("%rows", da, d, rcap, h, ta=True))
        dws["w3"].append(mm("%rows", db, d, rcap, h, ta=True))
        dr1 = mm(da, ws["w1"], rcap, h, d, tb=True)
        dr3 = mm(db, ws["w3"], rcap, h, d, tb=True)
        drows = ew([rcap, d], [(drows, [rcap, d], "d0, d1", f32), (dr1, [rcap, d], "d0, d1", f32),
                               (dr3, [rcap, d], "d0, d1", f32)],
                   ["%s1 = arith.addf %a0, %a1 : f32", "%res = arith.addf %s1, %a2 : f32"])
    # The dispatch's transpose: the rows' gradients back to their senders.
    a(f"  %dsend = shardx.ragged_all_to_all {drows}, %rcounts recv_counts = %counts on @mesh axes = {ep_axes} "
      f": {ty([rcap, d])}, {ty([n], 'i64')}, {ty([n], 'i64')} -> {ty([cap, d])}")
    dxq = mm("%place", "%dsend", q, cap, d)
    a(f"  %dxq3 = tensor.expand_shape {dxq} [[0, 1], [2]] output_shape [{tl}, {k}, {d}] : {ty([q, d])} into {ty([tl, k, d])}")
    xz = zeros([tl, d])
    a(f"  %dxe = linalg.generic {{indexing_maps = [affine_map<(i, c, s) -> (i, s, c)>, "
      f"affine_map<(i, c, s) -> (i, c)>], "
      f'iterator_types = ["parallel", "parallel", "reduction"]}} '
      f"ins(%dxq3 : {ty([tl, k, d])}) outs({xz} : {ty([tl, d])}) {{")
    a("  ^bb0(%v: f32, %acc: f32):")
    a("    %s = arith.addf %acc, %v : f32")
    a("    linalg.yield %s : f32")
    a(f"  }} -> {ty([tl, d])}")
    # The router: the gates depend on the two chosen logits only,
    # g1 = 1 / (1 + e^(l2 - l1)), g2 = 1 - g1: dL/d(l2 - l1) =
    # (dg2 - dg1) g1 g2; the other logits get nothing.
    for name, src in (("dg1", "%dgate"), ("dg2", "%dgate"), ("g1", "%gate"), ("g2", "%gate")):
        col = 0 if name.endswith("1") else 1
        a(f"  %{name}s = tensor.extract_slice {src}[0, {col}] [{tl}, 1] [1, 1] : {ty([tl, k])} to {ty([tl, 1])}")
        a(f"  %{name} = tensor.collapse_shape %{name}s [[0, 1]] : {ty([tl, 1])} into {ty([tl])}")
    dl = ew([tl, e], [("%dg1", [tl], "d0", f32), ("%dg2", [tl], "d0", f32),
                      ("%g1", [tl], "d0", f32), ("%g2", [tl], "d0", f32),
                      ("%i1", [tl], "d0", "i64"), ("%i2", [tl], "d0", "i64")],
            ["%gg = arith.mulf %a2, %a3 : f32", "%dd = arith.subf %a1, %a0 : f32",
             "%dlt = arith.mulf %dd, %gg : f32", "%j = linalg.index 1 : index",
             "%ji = arith.index_cast %j : index to i64",
             "%is1 = arith.cmpi eq, %ji, %a4 : i64", "%is2 = arith.cmpi eq, %ji, %a5 : i64",
             "%ng = arith.negf %dlt : f32", "%v2 = arith.select %is2, %dlt, %zf : f32",
             "%res = arith.select %is1, %ng, %v2 : f32"])
    dwr = mm(dl, "%xl", e, tl, d, ta=True)
    dxr = mm(dl, "%wr", tl, e, d)
    dxl = ew([tl, d], [("%dxe", [tl, d], "d0, d1", f32), (dxr, [tl, d], "d0, d1", f32)],
             ["%res = arith.addf %a0, %a1 : f32"])
    a(f"  %dx = shardx.all_gather {dxl} on @mesh axes = {all_axes} dim = 0 : {ty([tl, d])} -> {ty([n_all * tl, d])}")
    a(f"  %dwr = shardx.all_reduce {dwr} on @mesh axes = {all_axes} reduction = sum : {ty([e, d])}")
    outs = []
    for name, shp in (("w1", [d, h]), ("w3", [d, h]), ("w2", [h, d])):
        st = fresh("st")
        a(f"  {st}e = tensor.empty() : {ty([el] + shp)}")
        cur = f"{st}e"
        for x_e, g in enumerate(dws[name]):
            nxt = fresh("st")
            a(f"  {nxt} = tensor.insert_slice {g} into {cur}[{x_e}, 0, 0] [1, {shp[0]}, {shp[1]}] "
              f"[1, 1, 1] : {ty(shp)} into {ty([el] + shp)}")
            cur = nxt
        if len(mesh_shape) == 2:
            red = fresh("st")
            a(f"  {red} = shardx.all_reduce {cur} on @mesh axes = [0] reduction = sum : {ty([el] + shp)}")
            cur = red
        full = fresh("dw")
        a(f"  {full} = shardx.all_gather {cur} on @mesh axes = {ep_axes} dim = 0 : "
          f"{ty([el] + shp)} -> {ty([n * el] + shp)}")
        outs.append(full)
    a(f"  return %yall, %movedall, %dx, %dwr, {', '.join(outs)} : {ty([n_all * tl, d])}, {ty([])}{grads}")

    a("}")
    return "\n".join(L) + "\n"
