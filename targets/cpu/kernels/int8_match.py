"""The int8 contractions the quantized lowering marks, found again: qgemm + requantization pairs,
dynamic linear pairs (int8 rows x int8 or int4 weights, float epilogue), and a convolution's im2col
to pack per call.

`lowering/quantized_*.py` emits the markers below on the generics it builds; etc-cpu-int8-kernels
finds each pair through them (`match_qgemm`, `match_dynamic`) and replaces it with one kernel
(`int8_kernel.py`, `dynamic_linear_kernel.py`), and packs a convolution's im2col straight from the image
(`pack_source`, `im2col_pack.py`). The layouts (`PANEL` columns per B panel, `GROUP` K values per
dot-product lane) are the lowering's and the kernels' contract.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch_mlir import ir

from etc.ir.ops import defining_op, user_op

QGEMM = "etc.cpu.qgemm"  # on the contraction generic: {kind, a_unsigned}
REQUANT = "etc.cpu.requant"  # on its requantization generic: {per, zero_point, min, max, fits_i32}
QWINDOW = "etc.cpu.qwindow"  # on a depthwise/grouped int8 convolution generic: {groups}
QGEMM_DYNAMIC = "etc.cpu.qgemm_dynamic"  # on a dynamic linear's int8 x int8/int4 contraction: {bits, group_size}
QDEQUANT = "etc.cpu.qdequant"  # on its epilogue (activation zero point and scale, bias)
QQUANT = "etc.cpu.qquant"  # on the activation's quantize generic: {granularity, floor} (the scale's minimum)
IM2COL = "etc.cpu.im2col"  # on a convolution's im2col gather: {stride, dilation}
QADD = "etc.cpu.qadd"  # on an int8 add generic: its operands' and its output's quantization (see `ResidualAdd`)
PANEL = 16  # columns per B panel: one 512-bit vector of i32 accumulators (two 256-bit ones)
GROUP = 4  # K values per dot-product lane


def _shape(value) -> list:
    return list(ir.ShapedType(value.type).shape)


@dataclass
class QgemmPair:
    qgemm: object
    requant: object
    kind: str
    a_unsigned: bool
    per: str
    zero_point: int
    lo: int
    hi: int
    M: int
    N: int
    KB: int
    NB: int
    fits_i32: bool  # the scaled accumulators stay inside i32 (the lowering's bound): clamp by saturation


def contraction_behind(value, marker: str):
    """The contraction (a linalg.generic marked `marker`) an epilogue reads through the collapse
    of its tile layout (and the slice of a padded panel), or None."""
    op = defining_op(value)
    if op is not None and op.name == "tensor.extract_slice":
        op = defining_op(op.operands[0])
    if op is None or op.name != "tensor.collapse_shape":
        return None
    qgemm = defining_op(op.operands[0])
    if qgemm is None or qgemm.name != "linalg.generic" or marker not in qgemm.attributes:
        return None
    return qgemm


def match_qgemm(requant) -> "QgemmPair | None":
    attrs = ir.DictAttr(requant.attributes[REQUANT])
    qgemm = contraction_behind(requant.operands[0], QGEMM)
    if qgemm is None:
        return None
    q = ir.DictAttr(qgemm.attributes[QGEMM])
    M, KB, _ = _shape(qgemm.operands[0])
    NB = _shape(qgemm.operands[1])[0]
    _, N = _shape(requant.results[0])
    return QgemmPair(qgemm, requant, ir.StringAttr(q["kind"]).value, ir.BoolAttr(q["a_unsigned"]).value,
                 ir.StringAttr(attrs["per"]).value, ir.IntegerAttr(attrs["zero_point"]).value,
                 ir.IntegerAttr(attrs["min"]).value, ir.IntegerAttr(attrs["max"]).value, M, N, KB, NB,
                 "fits_i32" in attrs and ir.BoolAttr(attrs["fits_i32"]).value)


@dataclass
class ResidualAdd:
    """An int8 add that reads a qgemm's requantized result (`own`: 0 as its first operand, 1 as
    its second) and nothing else reads: ResNet's shortcut joins. Its arithmetic is the
    lowering's (`lower_add`): q = clamp(roundeven(((a - za) * sa + (b - zb) * sb) * inverse) + zp)."""
    add: object
    residual: object  # the add's other operand
    shape: list  # the add's
    reassociation: str  # the expand_shape from the qgemm's [M, N] to the add's shape ("": none)
    own: int
    zero_points: tuple  # (za, zb)
    scales: tuple  # (sa, sb) as float32 values
    inverse: float
    zero_point: int
    lo: int
    hi: int


def match_residual_add(requant) -> "ResidualAdd | None":
    """The int8 add (`QADD`) that is the only reader of `requant`'s result (through the expand to
    the layer's shape), whose other operand has that same shape; None when there is none."""
    value, reassociation = requant.results[0], ""
    uses = list(value.uses)
    if len(uses) != 1:
        return None
    user = user_op(uses[0])
    if user.name == "tensor.expand_shape":
        reassociation = str(user.attributes["reassociation"])
        value = user.results[0]
        uses = list(value.uses)
        if len(uses) != 1:
            return None
        user = user_op(uses[0])
    if user.name != "linalg.generic" or QADD not in user.attributes or len(list(user.operands)) != 3:
        return None
    own = 0 if user.operands[0] == value else 1
    residual = user.operands[1 - own]
    if residual == value or residual.type != value.type:
        return None
    a = ir.DictAttr(user.attributes[QADD])
    i, f = (lambda k: ir.IntegerAttr(a[k]).value), (lambda k: ir.FloatAttr(a[k]).value)
    return ResidualAdd(user, residual, _shape(value), reassociation, own, (i("a_zero_point"), i("b_zero_point")),
                       (f("a_scale"), f("b_scale")), f("inverse"), i("zero_point"), i("min"), i("max"))


def tail_columns(columns: int) -> int:
    """How many of a convolution's output positions the kernel multiplies along K instead of in a
    padded panel: the last panel's, when they are at most half of it (a padded panel costs 16
    columns' work whatever it holds; along K each costs about one). 0: none."""
    rest = columns % PANEL
    return rest if columns > PANEL and rest <= PANEL // 2 else 0


def taps_first(C: int, KH: int, KW: int, stride: tuple, P: int) -> bool:
    """Whether a convolution's K runs tap by tap (k = (kh, kw, c)): its channels come in whole
    groups of 4 (a group of K is 4 channels at one tap), it has several taps, stride 1 and no
    tail columns. The kernel then reads B in place from the image's channel-interleaved copies
    (`im2col_pack.ChannelCopy`: KW interleaved images per call against the pack's KH * KW), and
    where it cannot (no dot-product instruction) the pack gathers K in this order alike. ResNet-8's
    16-channel 3x3 at 32 x 32: 7.3 -> 5.3 us; ResNet-50's 64-channel 3x3 at 56 x 56: 262 -> 230 us.
    With stride 2 the copies hold every column and the panels need a gather (33 -> 36 us, a
    3x3 64 -> 128 at 28 x 28): packed."""
    return C % GROUP == 0 and KH * KW > 1 and tuple(stride) == (1, 1) and not tail_columns(P)


@dataclass
class Im2col:
    """A convolution's im2col gather (etc-cpu-lower-quantized, `etc.cpu.im2col`): B[k, p] =
    x[c, oh * sh + kh * dh, ow * sw + kw * dw] xor 0x80, k = (c, kh, kw) or, `taps_first`,
    (kh, kw, c), p = (oh, ow), over the padded image x [C, Hp, Wp], then packed as
    [NB, KB, 16, 4] (K and P padded)."""
    C: int
    Hp: int
    Wp: int
    KH: int
    KW: int
    OH: int
    OW: int
    sh: int
    sw: int
    dh: int
    dw: int
    taps_first: bool = False

    @property
    def K(self) -> int:
        return self.C * self.KH * self.KW

    @property
    def P(self) -> int:
        return self.OH * self.OW

    def k_offset(self, k: int) -> int:
        """Row k's first byte in the flattened image (k past K: the last row; its weights are zero)."""
        k = min(k, self.K - 1)
        c, r = (k % self.C, k // self.C) if self.taps_first else divmod(k, self.KH * self.KW)
        kh, kw = divmod(r, self.KW)
        return c * self.Hp * self.Wp + kh * self.dh * self.Wp + kw * self.dw

    def p_offset(self, q: int) -> int:
        """Output position q's offset from its row's first byte (q past P: any, the columns are cut)."""
        oh, ow = divmod(q, self.OW)
        return oh * self.sh * self.Wp + ow * self.sw

    def period(self) -> tuple[int, int]:
        """(L, D): the panels' offsets repeat every L panels, shifted by D bytes."""
        for L in range(1, self.OW // math.gcd(self.OW, PANEL) + 1):
            D = self.p_offset(PANEL * L)
            if all(self.p_offset(q + PANEL * L) - self.p_offset(q) == D for q in range(self.OW)):  # residues
                return L, D
        raise AssertionError("the output row always repeats")  # L = OW / gcd(OW, 16) does


def pack_source(qgemm):
    """A convolution's qgemm packs its im2col per call: (the padded image, the gather's geometry,
    the transpose that packs it), following the chain etc-cpu-lower-quantized emits (gather, collapse,
    padding, expand, transpose); None for a prepacked operand (a linear layer's weight)."""
    transpose = defining_op(qgemm.operands[1])
    if transpose is None or transpose.name != "linalg.transpose":
        return None
    if list(ir.DenseI64ArrayAttr(transpose.attributes["permutation"])) != [2, 0, 3, 1]:
        return None
    op = defining_op(transpose.operands[0])
    while op is not None and op.name in ("tensor.expand_shape", "tensor.pad", "tensor.collapse_shape"):
        op = defining_op(op.operands[0])
    if op is None or IM2COL not in op.attributes:
        return None
    attrs = ir.DictAttr(op.attributes[IM2COL])
    sh, sw = ir.DenseI64ArrayAttr(attrs["stride"])
    dh, dw = ir.DenseI64ArrayAttr(attrs["dilation"])
    C, Hp, Wp = _shape(op.operands[0])
    taps_first = "taps_first" in attrs
    shape = _shape(op.results[0])
    KH, KW, OH, OW = (shape[0], shape[1], *shape[3:]) if taps_first else shape[1:]
    return op.operands[0], Im2col(C, Hp, Wp, KH, KW, OH, OW, sh, sw, dh, dw, taps_first), transpose



@dataclass
class DynamicPair:
    qgemm: object  # acc[M, NB, 16] f32 = sum q * w * ws (etc.cpu.qgemm_dynamic)
    epilogue: object  # y[M, N] = (acc - zp[m] C[n]) s[m] + bias[n] (etc.cpu.qdequant)
    activation: object  # x [M, K] f32, before the quantize generic (etc.cpu.qquant) and its range
    bits: int  # the weights': 8 or 4 (two per byte)
    granularity: str  # the activation's scale: per_row, per_tensor
    floor: float  # the scale's minimum (torchao's smallest normal, PT2E's eps)
    M: int  # < 0: dynamic
    K: int
    N: int
    KB: int  # the panels' byte rows: K / 4 (int8), K / 8 (int4), K padded up
    NB: int
    G: int
    group: int


def match_dynamic(epilogue) -> "DynamicPair | None":
    """The chain etc-cpu-lower-quantized emits for a dynamic linear, from its epilogue: the
    contraction, the quantize generic of its activation operand (through the zero padding of K)."""
    qgemm = contraction_behind(epilogue.operands[0], QGEMM_DYNAMIC)
    if qgemm is None:
        return None
    quantize = defining_op(qgemm.operands[0])
    if quantize is None or QQUANT not in quantize.attributes:
        return None
    x = quantize.operands[0]
    padded = defining_op(x)
    if padded is not None and padded.name == "tensor.pad":
        x = padded.operands[0]
    attrs = ir.DictAttr(qgemm.attributes[QGEMM_DYNAMIC])
    bits, group = (ir.IntegerAttr(attrs[k]).value for k in ("bits", "group_size"))
    q_attrs = ir.DictAttr(quantize.attributes[QQUANT])
    M, KB = ir.RankedTensorType(qgemm.operands[0].type).shape[:2]
    NB, G, _ = _shape(qgemm.operands[2])
    N = _shape(epilogue.results[0])[1]
    return DynamicPair(qgemm, epilogue, x, bits, ir.StringAttr(q_attrs["granularity"]).value,
                       ir.FloatAttr(q_attrs["floor"]).value, -1 if ir.ShapedType.is_dynamic_size(M) else M,
                       _shape(x)[1], N, KB, NB, G, group)
