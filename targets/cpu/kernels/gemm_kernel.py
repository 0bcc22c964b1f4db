"""The GEMM kernel's text: a private function computing one contraction on its tile layout.

Every static f32 contraction big enough to pay for it becomes one *GEMM kernel*, the root of a
dispatch region: a private function built here as text (`kernel_function`), called, then inlined
and tiled (`gemm_schedule.py`). On its tile layout (`Layout`) it computes

    init      the accumulator's start: a constant, a broadcast bias, or the C operand
    C += A x B   A [M, K] read in place (row blocks of mr; the partial block is peeled);
                 B an activation (or an im2col, or a 1x1 convolution's input) read in place
                 as [K, N]: the layout is [batch, rows, N], the columns tiled by nr = a few
                 vector widths, the partial panel peeled, nothing padded (its last N % 16 <= 8
                 columns, after a full panel, dot products along K: `_leftover_text`); an im2col, and a
                 matmul's B read by enough row blocks, gathered per column panel into a
                 contiguous [K, nr] buffer (`gemm_match.gather_per_panel`); B a
                 weight: packed into contiguous column panels [NB, K, nr] (zero padded) when
                 the blob is built, the layout [batch, rows, NB, nr] (`gemm_match.b_in_place`)
    epilogue  the contraction's elementwise consumer (BN, activation, residual add...), whose
              body etc-cpu-gemm-regions moves in (an identity until then)

Each mr x nr tile is accumulated over the whole K in registers (6 x 64 f32 = 24 zmm on AVX-512;
see isa.py), finished by the epilogue and stored once. (Measured against the Goto-style K
blocking this replaced, on this machine: 1024^3 0.92x of OpenBLAS instead of 0.75x, 256^3 0.99x
instead of 1.08x, and no K blocking leaves the epilogue a single pass in registers.) The code
calls no library (no BLAS, no OpenMP).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from torch_mlir import ir

from etc.targets.cpu.ir_query import DYNAMIC
from etc.targets.cpu.kernel_ir import KernelText, tensor_type
from etc.targets.cpu.kernels.gemm_match import Gemm, KernelConfig, b_in_place, gather_per_panel, leftover_columns
from etc.targets.cpu.kernels.gemm_operands import (column_slice, im2col, im2col_gather, insert_columns, panel_gather,
                                                   dot_products)

# The SSA name of a dynamic kernel's row count (`tensor.dim` of A at the kernel's entry).
ROWS = "%rows"


def _pad(t: KernelText, value: str, shape: list, high: list, element: str = "f32") -> tuple[str, list]:
    """`value` zero padded at the high end of each dimension (f32 only: the kernel's `%zero`)."""
    if any(high) and element != "f32":
        raise NotFusable(f"padding a {element} tensor")
    return t.pad(value, shape, [0] * len(shape), high, "%zero", element)


def _reshape(t: KernelText, kind: str, value: str, src: list, dst: list, groups: list, element: str = "f32") -> str:
    """An expand_shape or collapse_shape; a dynamic size is the kernel's row count."""
    return t.reshape(kind, value, groups, src, dst, element, output_shape=[str(d) if d >= 0 else ROWS for d in dst])


# ------------------------------------------------------------------ dispatch regions


class NotFusable(Exception):
    """An init or epilogue operand the kernel layout cannot read (the message says why)."""


@dataclass(frozen=True)
class Layout:
    """How a kernel's tile layout [batch, rows, NB, nr] covers its result tensor.

    `groups` are the result's dimensions (batch, rows, columns), each group collapsed into one
    dimension of the tile layout; columns are zero padded to whole nr-wide panels. A
    convolution's rows are its filters and its columns its output pixels (transposed: the
    other way round); a matmul's are M and N."""

    shape: tuple
    groups: tuple  # (batch dims, row dims, column dims) of `shape`
    batch: int
    rows: int
    cols: int
    nr: int
    split: bool = True  # columns as [panels, nr] (B packed in panels) or one dimension (B read in place)
    dynamic_rows: bool = False  # `rows` is the upper bound of the run-time row count

    @property
    def panels(self) -> int:
        return -(-self.cols // self.nr)

    @property
    def tile_shape(self) -> list:
        rows = DYNAMIC if self.dynamic_rows else self.rows
        return [self.batch, rows, self.panels, self.nr] if self.split else [self.batch, rows, self.cols]

    @property
    def dynamic_sizes(self) -> str:
        """The operands of a tensor.empty of `tile_shape`."""
        return f"({ROWS})" if self.dynamic_rows else "()"

    @property
    def dims(self) -> str:
        return "(b, i, jb, j)" if self.split else "(b, i, n)"

    @property
    def col_names(self) -> tuple:
        return ("jb", "j") if self.split else ("n",)


def layout(g: Gemm, cfg: KernelConfig, reshape: "tuple | None" = None) -> Layout:
    """The tile layout of `g` over its result, or over the result seen through `reshape` =
    (kind, reassociation, shape): an expand_shape or collapse_shape that splits or merges
    dimensions within a group (a Linear's [3136, 384] seen as [1, 56, 56, 384]); NotFusable
    when it mixes groups."""
    own = tuple(ir.RankedTensorType(g.result_type).shape)
    if g.conv is not None:
        groups = ((0,), (2, 3), (1,)) if g.transposed else ((0,), (1,), (2, 3))
    elif len(own) == 2:
        groups = ((), (0,), (1,))
    else:
        groups = ((0,), (1,), (2,))
    rows, cols = (g.N, g.M) if g.transposed else (g.M, g.N)
    if reshape is not None:
        if g.dynamic_rows:
            raise NotFusable("the consumer reads the result reshaped, and its rows are dynamic")
        groups = _regroup(own, groups, *reshape)
        own = tuple(reshape[2])
    return Layout(own, groups, g.batch, rows, cols, cfg.nr, split=not b_in_place(g, cfg), dynamic_rows=g.dynamic_rows)




def _regroup(own: tuple, groups: tuple, kind: str, reassociation: list, shape: tuple) -> tuple:
    """`groups` of `own` carried through a reshape to `shape`."""
    group_of = {d: n for n, dims in enumerate(groups) for d in dims}
    new = {}
    for j, dims in enumerate(reassociation):
        if kind == "expand":  # own dim j -> shape dims `dims`
            for fd in dims:
                new[fd] = group_of[j]
        else:  # own dims `dims` -> shape dim j; unit dims go with any group
            found = {group_of[d] for d in dims if own[d] != 1} or {group_of[dims[0]]}
            if len(found) != 1:
                raise NotFusable("the consumer reads the result with rows and columns merged")
            new[j] = found.pop()
    out = tuple(tuple(fd for fd in range(len(shape)) if new[fd] == n) for n in range(3))
    for dims in out:
        if dims and list(dims) != list(range(dims[0], dims[-1] + 1)):
            raise NotFusable("the consumer reads the result with its dimensions interleaved")
    return out


def _to_result(t: KernelText, value: str, extents: list, order: list, lay: Layout) -> str:
    """`value` of shape `extents` (one dimension per group, groups in `order`) -> the result shape."""
    present = [k for k, gid in enumerate(order) if lay.groups[gid]]
    shape = list(extents)
    if len(present) != len(extents):  # an empty group has extent 1: merge it into a neighbour
        assoc, pending = [], []
        for k in range(len(extents)):
            if k in present:
                assoc.append(pending + [k])
                pending = []
            else:
                (assoc[-1] if assoc else pending).append(k)
        if pending:
            assoc[-1].extend(pending)
        shape = [extents[k] for k in present]
        value = _reshape(t, "collapse", value, list(extents), shape, assoc)
    dims = [list(lay.groups[order[k]]) for k in present]
    if [d for grp in dims for d in grp] != list(range(len(lay.shape))):
        raise NotFusable("the result's dimensions are not grouped in order")
    if len(dims) != len(lay.shape):
        value = _reshape(t, "expand", value, shape, list(lay.shape), dims)
    return value


@dataclass
class Extra:
    """A kernel argument the init or the epilogue reads: its tensor type and, per dimension,
    the result dimension it runs along (None: a unit dimension, broadcast)."""

    type: object  # ir.RankedTensorType
    used: list
    groups: "tuple | None" = None  # the result dimensions `used` refers to, when not the kernel's result


@dataclass
class Region:
    """What a GEMM kernel computes around its contraction, in registers.

    init: ("fill", "<literal> : f32") starts the accumulator at a constant, ("broadcast", i)
    at extra i broadcast (a bias), ("copy", i) at extra i itself. The epilogue reads, per
    input, the accumulator ("acc") or an extra (its index), with the block argument types
    `arg_types` (inputs, then the output); its body is moved in from the consumer by
    etc-cpu-gemm-regions (an identity until then)."""

    init: tuple
    extras: list
    inputs: list
    arg_types: list
    body: bool = True  # False: no epilogue (the tile is stored as accumulated)
    kc: int = 1 << 30  # the K block (`kernel_kc`): shorter than K, K is split into blocks of it


def _plan_extra(extra: Extra, lay: Layout) -> tuple:
    """(reassociation collapsing the extra to one dimension per group it runs along, those groups
    in tile order, the same groups in the operand's order). NotFusable when a group is only
    partly present or its dimensions are permuted."""
    groups = extra.groups or lay.groups
    group_of = {d: n for n, dims in enumerate(groups) for d in dims}
    used = [u for u in extra.used if u is not None]
    if used != sorted(used) or len(set(used)) != len(used):
        raise NotFusable("an operand is read transposed")
    present = []
    for n, dims in enumerate(groups):
        mine = [u for u in used if group_of.get(u) == n]
        if mine and mine != list(dims):
            raise NotFusable("an operand broadcasts along part of a collapsed dimension")
        if mine:
            present.append(n)
    order = []
    for u in used:
        if group_of.get(u) is not None and group_of[u] not in order:
            order.append(group_of[u])
    assoc, pending, current = [], [], None
    for k, u in enumerate(extra.used):
        if u is None:
            (assoc[-1] if assoc else pending).append(k)
            continue
        n = group_of[u]
        if assoc and n == current:
            assoc[-1].append(k)
        else:
            assoc.append(pending + [k])
            pending, current = [], n
    if pending and assoc:
        assoc[-1].extend(pending)
    return assoc, present, order


def check_extra(extra: Extra, lay: Layout) -> None:
    """Raise NotFusable when the kernel cannot read `extra` in its tile layout."""
    if not ir.RankedTensorType(extra.type).has_static_shape:
        raise NotFusable("an operand with dynamic dims (only the contraction's own rows may be dynamic)")
    _, present, order = _plan_extra(extra, lay)
    element = str(ir.RankedTensorType(extra.type).element_type)
    if 2 in present and lay.split and lay.panels * lay.nr != lay.cols and element != "f32":
        raise NotFusable(f"a {element} operand would need padding to whole column panels")
    if order != sorted(order) and element != "f32":
        raise NotFusable(f"a {element} operand would need a transpose into the tile layout")


def _adapt_map(extra: Extra, lay: Layout) -> str:
    """The map results over (b, i, jb, j) the adapted `extra` is read with."""
    _, present, _ = _plan_extra(extra, lay)
    names = [("b",), ("i",), lay.col_names]
    return "(" + ", ".join(d for n in present for d in names[n]) + ")"


def _adapt(t: KernelText, value: str, extra: Extra, lay: Layout) -> tuple[str, str, str]:
    """`value` (an extra) reshaped to the tile layout: (value, its type, its map results over
    (b, i, jb, j)): one dimension per group it runs along (transposed into the tile's group order
    when needed: a residual read by a transposed convolution), the columns padded and split
    into panels."""
    assoc, present, order = _plan_extra(extra, lay)
    rtype = ir.RankedTensorType(extra.type)
    element = str(rtype.element_type)
    shape = list(rtype.shape)
    sizes = [lay.batch, lay.rows, lay.cols]
    collapsed = [sizes[n] for n in order]
    if len(assoc) != len(shape) or any(len(a) != 1 for a in assoc):
        value = _reshape(t, "collapse", value, shape, collapsed, assoc, element)
    shape = collapsed
    if order != present:
        value, shape = t.transpose(value, shape, [order.index(n) for n in present])
    names = [("b",), ("i",), lay.col_names]
    results = [d for n in present for d in names[n]]
    if 2 in present and lay.split:
        value, shape = _pad(t, value, shape, [0] * (len(shape) - 1) + [lay.panels * lay.nr - lay.cols], element)
        new = shape[:-1] + [lay.panels, lay.nr]
        value = _reshape(t, "expand", value, shape, new, [[i] for i in range(len(shape) - 1)] +
                         [[len(shape) - 1, len(shape)]], element)
        shape = new
    return value, tensor_type(shape, element), "(" + ", ".join(results) + ")"


def _adapt_columns(t: KernelText, value: str, extra: Extra, lay: Layout, columns: "range | None") -> tuple:
    """`_adapt`, then only `columns` of the tile layout's (not split) columns when the extra runs
    along them."""
    value, vtype, vmap = _adapt(t, value, extra, lay)
    if columns is None or "n" not in vmap:
        return value, vtype, vmap
    *dims, element = vtype[len("tensor<"):-1].split("x")
    shape = [int(d) for d in dims]
    return column_slice(t, value, shape, columns, element), tensor_type(shape[:-1] + [len(columns)], element), vmap


def _init_text(t: KernelText, region: Region, lay: Layout, empty: str, tile: str, attrs: str,
               columns: "range | None" = None) -> str:
    """The accumulator's start (`Region.init`) written into `empty` of the tile type `tile`: the
    tile layout `lay`'s, or only its `columns`; `attrs` tag it."""
    extras = [f"%X{n}" for n in range(len(region.extras))]
    dims4 = lay.dims
    init = t.fresh("init")
    par = ", ".join(['"parallel"'] * len(lay.tile_shape))
    kind, what = region.init
    tagged = f" attrs = {{{attrs}}}" if attrs else ""
    if kind == "copy" and _adapt_map(region.extras[what], lay) == dims4:
        # C itself: a named copy (an identity generic would be folded away before tiling)
        value, vtype, _ = _adapt_columns(t, extras[what], region.extras[what], lay, columns)
        t.emit(f"{init} = linalg.copy ins({value} : {vtype}) outs({empty} : {tile}) -> {tile}")
    elif kind == "fill":
        # a generic, not linalg.fill: the tiling folds its unit dimensions like the contraction's
        t.emit(f"{init} = linalg.generic {{indexing_maps = [affine_map<{dims4} -> {dims4}>], iterator_types = "
               f"[{par}]}} outs({empty} : {tile}){tagged} {{")
        t.emit("^bb0(%o: f32):")
        cst = t.fresh("c")
        t.emit(f"  {cst} = arith.constant {what}")
        t.emit(f"  linalg.yield {cst} : f32")
        t.emit(f"}} -> {tile}")
    else:
        value, vtype, vmap = _adapt_columns(t, extras[what], region.extras[what], lay, columns)
        t.emit(f"{init} = linalg.generic {{indexing_maps = [affine_map<{dims4} -> {vmap}>, affine_map<{dims4} -> "
               f"{dims4}>], iterator_types = [{par}]}} ins({value} : {vtype}) outs({empty} : {tile}){tagged} {{")
        t.emit("^bb0(%x: f32, %o: f32):")
        t.emit("  linalg.yield %x : f32")
        t.emit(f"}} -> {tile}")
    return init


def _epilogue_text(t: KernelText, region: Region, lay: Layout, acc: str, dest: str, tile: str, attrs: str,
                   columns: "range | None" = None) -> str:
    """The epilogue of the accumulated `acc` written into `dest` (an identity until
    etc-cpu-gemm-regions moves the consumer's body into every generic tagged `attrs`)."""
    extras = [f"%X{n}" for n in range(len(region.extras))]
    dims4 = lay.dims
    par = ", ".join(['"parallel"'] * len(lay.tile_shape))
    ins, types, maps = [], [], []
    for source in region.inputs:
        if source == "acc":
            ins.append(acc), types.append(tile), maps.append(dims4)
        else:
            value, vtype, vmap = _adapt_columns(t, extras[source], region.extras[source], lay, columns)
            ins.append(value), types.append(vtype), maps.append(vmap)
    result = t.fresh("epi")
    amaps = ", ".join(f"affine_map<{dims4} -> {m}>" for m in maps + [dims4])
    t.emit(f"{result} = linalg.generic {{indexing_maps = [{amaps}], iterator_types = "
           f"[{par}]}} ins({', '.join(ins)} : {', '.join(types)}) "
           f"outs({dest} : {tile}) attrs = {{{attrs}}} {{")
    args = ", ".join(f"%p{n}: {ty}" for n, ty in enumerate(region.arg_types))
    t.emit(f"^bb0({args}):")
    t.emit(f"  linalg.yield %p{region.inputs.index('acc')} : f32")
    t.emit(f"}} -> {tile}")
    return result


def _region_text(t: KernelText, g: Gemm, lay: Layout, region: Region, tag: str, a: str, a_map: str, a_type: str,
                 b: str, b_map: str, b_type: str, columns: "range | None" = None, dest: "str | None" = None) -> str:
    """The init, the contraction and the epilogue on the tile layout; returns the epilogue's
    result. `columns`: only those of the (not split) columns, the epilogue written into `dest`."""
    tile = tensor_type(replace(lay, cols=len(columns)).tile_shape if columns is not None else lay.tile_shape)
    empty = t.fresh("e")
    blocked = region.kc < g.K
    if blocked and region.body:
        # K in blocks: each column panel's accumulator lives in memory between the blocks. A
        # tensor.empty would fold into one panel-sized buffer allocated inside the panel loop,
        # which the threads sharing that loop would share; a whole-size buffer gives each
        # panel its own columns.
        t.emit(f"{empty} = bufferization.alloc_tensor{lay.dynamic_sizes} : {tile}")
    else:
        t.emit(f"{empty} = tensor.empty{lay.dynamic_sizes} : {tile}")
    init = _init_text(t, region, lay, empty, tile, f"{tag}_init", columns)
    loops = "b, jb, i, j, k" if lay.split else "b, i, n, k"
    out = _mul_add_generic(t, loops, (a_map, b_map, lay.dims), (a, b, init), (a_type, b_type, tile), tag)
    if blocked and not region.body:
        # K in blocks and nothing to finish: the blocks accumulate in the result itself (the init
        # a pass of its own before them); an identity epilogue would copy every panel once more.
        return out
    if dest is None:
        dest = t.fresh("e")
        t.emit(f"{dest} = tensor.empty{lay.dynamic_sizes} : {tile}")
    return _epilogue_text(t, region, lay, out, dest, tile, f"{tag}_epi", columns)


def _signature(name: str, g: Gemm, region: Region, lay: Layout) -> str:
    args = [f"%A: {g.a.type}", f"%B: {g.b.type}"] + [f"%X{n}: {e.type}" for n, e in enumerate(region.extras)]
    return f"func.func private @{name}({', '.join(args)}) -> {tensor_type(lay.shape)} {{"


def kernel_function(g: Gemm, cfg: KernelConfig, name: str, tag: str, region: Region,
                    reshape: "tuple | None" = None) -> str:
    """Text of `func.func private @name(A, B, extras...) -> result`: `region` around the packed
    contraction of `g`.

    A is read in place, row blocks of mr with the partial one peeled. (Packing A into
    [M/mr, K, mr] micro-panels measured within 3% of in-place A on Zen 5 at M=N=K=1024 and
    512x1024x512, and costs an M*K copy: not done.)"""
    if g.transposed:
        return transposed_conv_kernel(g, cfg, name, tag, region, reshape)
    nr = cfg.nr
    lay = layout(g, cfg, reshape)
    Np = lay.panels * nr
    NB = lay.panels
    t = KernelText()
    t.emit("%zero = arith.constant 0.0 : f32")
    a_shape = list(ir.RankedTensorType(g.a.type).shape)
    b_shape = list(ir.RankedTensorType(g.b.type).shape)
    M = DYNAMIC if g.dynamic_rows else g.M
    if g.dynamic_rows:
        t.emit(f"%c_rows = arith.constant {len(a_shape) - 2} : index")
        t.emit(f"{ROWS} = tensor.dim %A, %c_rows : {g.a.type}")

    # A -> [B?, M, K]
    a = "%A"
    if g.conv is not None:  # filter [F, C, KH, KW] -> [F, CKK]
        a = _reshape(t, "collapse", a, a_shape, [g.M, g.K], [[0], [1, 2, 3]])

    ab = "b, " if g.a_batched else ""
    bb = "b, " if g.b_batched else ""
    a_type = tensor_type(([g.batch] if g.a_batched else []) + [M, g.K])
    b = "%B"
    lead = [g.batch] if g.b_batched else []
    if not lay.split:  # B read in place as [B?, K, N]: the columns are tiled, never padded
        left = leftover_columns(g, cfg)
        main = range(g.N - left)  # the rest are the leftover's dot products (`_leftover_text`)
        if g.conv is not None and g.b_layout == "kn":  # 1x1: X [N, C, H, W] -> [N, C, H*W]
            b = _reshape(t, "collapse", b, b_shape, [g.batch, g.K, g.N], [[0], [1], [2, 3]])
        in_place = b  # [B?, K, N] (a matmul's B; a 1x1 convolution's input)
        if gather_per_panel(g, cfg):  # [B, K, N], one [K, nr] buffer per panel
            b = (im2col_gather(t, b, g, main, f"{tag}_col") if g.b_layout == "im2col"
                 else panel_gather(t, b, g, tag, len(main)))
            bb, lead = "b, ", [g.batch]
        else:
            if g.b_layout == "im2col":  # its panel buffer too large for a thread's stack: whole
                b, b_shape = im2col(t, b, g)
            in_place = b
            if left:
                b = column_slice(t, b, lead + [g.K, g.N], main)
        b_type = tensor_type(lead + [g.K, len(main)])
        if not left:
            out = _region_text(t, g, lay, region, tag, a, f"({ab}i, k)", a_type, b, f"({bb}k, n)", b_type)
        else:
            whole = t.fresh("e")
            t.emit(f"{whole} = tensor.empty() : {tensor_type([g.batch, g.M, g.N])}")
            dest = column_slice(t, whole, [g.batch, g.M, g.N], main)
            out = _region_text(t, g, lay, region, tag, a, f"({ab}i, k)", a_type, b, f"({bb}k, n)", b_type,
                               columns=main, dest=dest)
            whole = insert_columns(t, out, whole, [g.batch, g.M, g.N], main)
            rest = range(len(main), g.N)
            if g.b_layout == "im2col":  # the leftover pixels' im2col columns, as rows
                bt = im2col_gather(t, "%B", g, rest, transposed=True)
                bt_batched = True
            else:
                src_lead = [g.batch] if g.b_batched else []
                bt, _ = t.transpose(column_slice(t, in_place, src_lead + [g.K, g.N], rest),
                                    src_lead + [g.K, left], list(range(len(src_lead))) + [len(src_lead) + 1,
                                                                                          len(src_lead)])
                bt_batched = g.b_batched
            out = _leftover_text(t, g, cfg, lay, region, tag, a, a_type, bt, bt_batched, whole, rest)
        r = _to_result(t, out, [g.batch, M, g.N], [0, 1, 2], lay)
        t.emit(f"return {r} : {tensor_type(lay.shape)}")
        return _signature(name, g, region, lay) + "\n" + t.text() + "\n}\n"

    # B packed into panels [B?, NB, K, nr]: a weight (evaluated when the blob is written) or an
    # activation narrower than one panel (`b_in_place`)
    n = len(lead)
    if g.b_layout in ("kn", "im2col"):  # [B?, K, N]
        if g.b_layout == "im2col":
            b, b_shape = im2col(t, b, g)
        elif g.conv is not None:  # 1x1: X [N, C, H, W] -> [N, C, H*W]
            b = _reshape(t, "collapse", b, b_shape, [g.batch, g.K, g.N], [[0], [1], [2, 3]])
            b_shape = [g.batch, g.K, g.N]
        b, b_shape = _pad(t, b, b_shape, [0] * (len(b_shape) - 1) + [Np - g.N])
        b = _reshape(t, "expand", b, b_shape, lead + [g.K, NB, nr], [[i] for i in range(n)] + [[n], [n + 1, n + 2]])
        b, _ = t.transpose(b, lead + [g.K, NB, nr], list(range(n)) + [n + 1, n, n + 2])
    else:  # "nk": [B?, N, K]
        b, b_shape = _pad(t, b, b_shape, [0] * (len(b_shape) - 2) + [Np - g.N, 0])
        b = _reshape(t, "expand", b, b_shape, lead + [NB, nr, g.K], [[i] for i in range(n)] + [[n, n + 1], [n + 2]])
        b, _ = t.transpose(b, lead + [NB, nr, g.K], list(range(n)) + [n, n + 2, n + 1])
    out = _region_text(t, g, lay, region, tag, a, f"({ab}i, k)", a_type, b, f"({bb}jb, k, j)",
                       tensor_type(lead + [NB, g.K, nr]))

    # back to the result type
    r = _reshape(t, "collapse", out, [g.batch, M, NB, nr], [g.batch, M, Np], [[0], [1], [2, 3]])
    if Np != g.N:
        s = t.fresh("s")
        t.emit(f"{s} = tensor.extract_slice {r}[0, 0, 0] [{g.batch}, {ROWS if g.dynamic_rows else g.M}, {g.N}] "
               f"[1, 1, 1] : {tensor_type([g.batch, M, Np])} to {tensor_type([g.batch, M, g.N])}")
        r = s
    r = _to_result(t, r, [g.batch, M, g.N], [0, 1, 2], lay)
    t.emit(f"return {r} : {tensor_type(lay.shape)}")
    return _signature(name, g, region, lay) + "\n" + t.text() + "\n}\n"


# The suffix of the leftover columns' epilogue tag (`<tag>_epi` + it): etc-cpu-gemm-regions moves
# the consumer's body into it too; etc-cpu-tile-gemm-kernels leaves it to the default loops.
LEFTOVER = "_leftover"


def _leftover_text(t: KernelText, g: Gemm, cfg: KernelConfig, lay: Layout, region: Region, tag: str, a: str,
                   a_type: str, bt: str, bt_batched: bool, whole: str, columns: range) -> str:
    """The last `columns` of a B read in place (`gemm_match.leftover_columns`) as dot products
    along K, written into those columns of `whole` [batch, M, N]; returns the new `whole`: the
    init over those columns, `gemm_operands.dot_products` added to it, then the epilogue (a pass
    over the [batch, M, columns] tile: a few rows of numbers per column)."""
    tile = tensor_type([g.batch, g.M, len(columns)])
    empty = t.fresh("e")
    t.emit(f"{empty} = tensor.empty() : {tile}")
    start = _init_text(t, region, lay, empty, tile, "", columns)
    result = dot_products(t, g, cfg, a, a_type, bt, bt_batched, start, len(columns))
    shape = [g.batch, g.M, g.N]
    dest = column_slice(t, whole, shape, columns)
    done = _epilogue_text(t, region, lay, result, dest, tile, f"{tag}_epi{LEFTOVER}", columns)
    return insert_columns(t, done, whole, shape, columns)


def _mul_add_generic(t: KernelText, dims: str, maps: tuple, values: tuple, types: tuple, tag: str) -> str:
    """Emit the GEMM kernel's contraction: C[cmap] += A[amap] * B[bmap] over `dims` (the last
    one the reduction), tagged for the transform script; returns its result."""
    (amap, bmap, cmap), (a, b, c), (a_type, b_type, c_type) = maps, values, types
    n = len(dims.split(","))
    its = ", ".join(['"parallel"'] * (n - 1) + ['"reduction"'])
    out = t.fresh("gemm")
    t.emit(f"{out} = linalg.generic {{indexing_maps = [affine_map<({dims}) -> {amap}>, "
           f"affine_map<({dims}) -> {bmap}>, affine_map<({dims}) -> {cmap}>], "
           f"iterator_types = [{its}]}} "
           f"ins({a}, {b} : {a_type}, {b_type}) outs({c} : {c_type}) attrs = {{{tag}}} {{")
    t.emit("^bb0(%x: f32, %y: f32, %acc: f32):")
    t.emit("  %m = arith.mulf %x, %y fastmath<contract> : f32")
    t.emit("  %s = arith.addf %acc, %m fastmath<contract> : f32")
    t.emit("  linalg.yield %s : f32")
    t.emit(f"}} -> {c_type}")
    return out



def transposed_conv_kernel(g: Gemm, cfg: KernelConfig, name: str, tag: str, region: Region,
                           reshape: "tuple | None" = None) -> str:
    """Text of the kernel of a transposed convolution: A = im2col^T [b, P, K] (read in place),
    B = filter [F, K] packed as in the "nk" layout, the tile layout [b, P, NB, nr] over the
    filters padded to whole column panels. Same loop nest as `kernel_function`."""
    nr, P, F, K, geo = cfg.nr, g.N, g.M, g.K, g.conv
    lay = layout(g, cfg, reshape)
    Fp = lay.panels * nr
    NB = lay.panels
    t = KernelText()
    t.emit("%zero = arith.constant 0.0 : f32")
    # A: the input as [b, K, P] (im2col, or the input itself for a direct 1x1), transposed.
    if g.b_layout == "im2col":
        col, _ = im2col(t, "%B", g)
    else:
        col = _reshape(t, "collapse", "%B", [g.batch, geo["c"], geo["h"], geo["w"]], [g.batch, K, P],
                       [[0], [1], [2, 3]])
    a, _ = t.transpose(col, [g.batch, K, P], [0, 2, 1])
    # B: filter [F, C, KH, KW] -> [F, K] -> padded [Fp, K] -> panels [NB, K, nr].
    w = _reshape(t, "collapse", "%A", [F, geo["c"], geo["kh"], geo["kw"]], [F, K], [[0], [1, 2, 3]])
    w, _ = _pad(t, w, [F, K], [Fp - F, 0])
    w = _reshape(t, "expand", w, [Fp, K], [NB, nr, K], [[0, 1], [2]])
    b, _ = t.transpose(w, [NB, nr, K], [0, 2, 1])
    out = _region_text(t, g, lay, region, tag, a, "(b, i, k)", tensor_type([g.batch, P, K]), b, "(jb, k, j)",
                       tensor_type([NB, K, nr]))
    r = _reshape(t, "collapse", out, [g.batch, P, NB, nr], [g.batch, P, Fp], [[0], [1], [2, 3]])
    if Fp != F:
        s = t.fresh("s")
        t.emit(f"{s} = tensor.extract_slice {r}[0, 0, 0] [{g.batch}, {P}, {F}] [1, 1, 1] "
               f": {tensor_type([g.batch, P, Fp])} to {tensor_type([g.batch, P, F])}")
        r = s
    r, _ = t.transpose(r, [g.batch, P, F], [0, 2, 1])
    r = _to_result(t, r, [g.batch, F, P], [0, 2, 1], lay)
    t.emit(f"return {r} : {tensor_type(lay.shape)}")
    return _signature(name, g, region, lay) + "\n" + t.text() + "\n}\n"
