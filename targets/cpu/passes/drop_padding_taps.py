"""etc-cpu-drop-padding-taps: a convolution's filter taps that read only zero padding are dropped.

Runs first in the cpu pipeline, on edge ops. A dilated convolution on a small map reads, for
some taps, nothing but its zero padding: DeepLabV3's ASPP (3x3 convolutions of dilation 12, 24
and 36 on MobileNetV3's 960 channels) at 224x224 sees a 14x14 map, so with dilation 24 or 36 the
eight outer taps of every output fall outside it; the same holds for any 3x3 convolution on a
1x1 map. Those taps multiply zeros: the GEMM still gathers them into its im2col panel and runs
K = 9 x channels where 1 x channels gives the same result. So for every static, non-transposed
2-D `edge.convolution`, per spatial dimension, the taps t with no output o for which
o*stride - padding + t*dilation lands inside the input are cut from both ends of the filter
(`edge.slice_tensor` of the weight, which etc-cpu-prepack-constants folds when the weight is a
constant) and the padding shrinks by the dropped leading taps' reach (a dimension left with one
tap gets dilation 1). The result is the same sum over the same products, exactly.

Each convolution with taps to drop is a decision of kind `taps`: `pruned` (KxK -> K'xK'), or
`all-taps` with the reason it could not be done (the live taps would need a negative padding,
a crop, or different padding at the two ends: `aten.convolution` expresses neither). A convolution whose taps all read input records
nothing: there is nothing to drop. The map's size must be static: a dilated convolution on a
dynamic map is `all-taps` with that reason.
Measured (bench/layers.py's aspp_960to256c14: DeepLabV3-MobileNetV3's ASPP at 224, one thread,
both in one process): 32.2 ms -> 13.0 ms, 1.50x -> 0.61x XNNPACK's time.
"""

from __future__ import annotations

from torch_mlir import ir

from etc.passes.pass_api import Pass, register_pass
from etc.targets.cpu import decisions
from etc.targets.cpu.ir_query import EDGE_CONVOLUTION, spatial_pairs, walk


def live_taps(size: int, kernel: int, stride: int, padding: int, dilation: int) -> tuple[int, int, int]:
    """(first, end, outputs): the taps [first, end) of one spatial dimension that read the input
    for at least one output (an inner dead tap between two live ones is kept), and the output size."""
    outputs = (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
    live = [t for t in range(kernel)
            if any(0 <= o * stride - padding + t * dilation < size for o in range(max(outputs, 0)))]
    if not live:  # no tap reads the input: keep one, the output is its bias either way
        return 0, 1, outputs
    return live[0], live[-1] + 1, outputs


def plan(size: int, kernel: int, stride: int, padding: int, dilation: int):
    """(first, end, new padding, new dilation) for one dimension, None when every tap reads input,
    or a str: why the dead taps cannot be dropped."""
    first, end, outputs = live_taps(size, kernel, stride, padding, dilation)
    if (first, end) == (0, kernel):
        return None
    kept = end - first
    new_padding = padding - first * dilation
    new_dilation = dilation if kept > 1 else 1
    if new_padding < 0:
        return f"the live taps would need padding {new_padding} (a crop, which aten.convolution cannot express)"
    if (size + 2 * new_padding - new_dilation * (kept - 1) - 1) // stride + 1 != outputs:
        return "the padding left at the two ends would differ (aten.convolution pads both alike)"
    return first, end, new_padding, new_dilation


def _static(value) -> list[int] | None:
    shape = ir.RankedTensorType(value.type)
    return None if any(shape.is_dynamic_dim(i) for i in range(shape.rank)) else list(shape.shape)


@register_pass
class DropPaddingTaps(Pass):
    """Cut the filter taps of each convolution that read only padding (module docstring)."""

    name = "etc-cpu-drop-padding-taps"
    summary = "Drop the filter taps of convolutions that read only zero padding (dilated convolutions on small maps)"

    def run(self, op) -> None:
        for conv in walk(op, (EDGE_CONVOLUTION,)):
            self._one(conv)

    def _one(self, conv) -> None:
        from etc.dialects import decode_op
        from etc.dialects.aten import build_op
        from etc.dialects.edge import OPS as EDGE_OPS

        args = decode_op(conv)
        weight = args["weight"]
        if args["transposed"] or ir.RankedTensorType(weight.type).rank != 4:
            return
        dilation, stride, padding = spatial_pairs(args, "dilation", "stride", "padding")
        if not (len(dilation) == len(stride) == len(padding) == 2):
            return
        x_shape, w_shape = _static(args["input"]), _static(weight)
        if x_shape is None or w_shape is None:
            if any(d > 1 for d in dilation):
                decisions.record(conv, "taps", "all-taps", "dynamic map size: which taps read only padding "
                                 "is not known at compile time")
                self.count("not taken")
            return
        plans = [plan(x_shape[2 + i], w_shape[2 + i], stride[i], padding[i], dilation[i]) for i in range(2)]
        if all(p is None for p in plans):
            return
        reasons = [p for p in plans if isinstance(p, str)]
        if reasons:
            decisions.record(conv, "taps", "all-taps", reasons[0])
            self.count("not taken")
            return
        element = ir.RankedTensorType(weight.type).element_type
        with ir.InsertionPoint(conv), conv.location:
            for i, p in enumerate(plans):
                if p is None:
                    continue
                first, end, padding[i], dilation[i] = p
                shape = list(ir.RankedTensorType(weight.type).shape)
                shape[2 + i] = end - first
                weight = build_op("aten::slice.Tensor", {"self": weight, "dim": 2 + i, "start": first,
                                                             "end": end, "step": 1},
                                  [ir.RankedTensorType.get(shape, element)], dialect_ops=EDGE_OPS).results[0]
            args.update(weight=weight, padding=padding, dilation=dilation)
            new = build_op("aten::convolution", args, [conv.results[0].type], loc=conv.location,
                           dialect_ops=EDGE_OPS)
            for name in ("etc.upper_bounds",):
                if name in conv.attributes:
                    new.attributes[name] = conv.attributes[name]
        kept = list(ir.RankedTensorType(weight.type).shape)[2:]
        decisions.record(new, "taps", "pruned", f"{w_shape[2]}x{w_shape[3]} -> {kept[0]}x{kept[1]}: the other "
                         "taps read only padding")
        conv.results[0].replace_all_uses_with(new.results[0])
        conv.erase()
        self.count("taken")
