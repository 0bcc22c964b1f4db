"""etc-cpu-conv1d-as-2d: a 1-D convolution becomes a 2-D one over a map of height 1.

Runs first in the cpu pipeline, on edge ops. torch-mlir lowers a 1-D `aten.convolution` (audio
front ends: Whisper's two convolutions over 3,000 mel frames, wav2vec2's feature encoder,
keyword spotters, 1-D depthwise convolutions in conformers) to `linalg.conv_1d_ncw_fcw`, which
no kernel of this target takes: it ran as scalar loops (Whisper-tiny's encoder spent most of its
time there and was 1.6x torch's). The same convolution with the input seen as [N, C, 1, L] and
the filter as [F, C/G, 1, K] (stride, padding and dilation 1 / 0 / 1 in the new dimension) is a
2-D convolution, which the GEMM, window (depthwise) and grouped kernels take; the result is
squeezed back to [N, F, L']. The sum is the same, term for term.

Static shapes only: a dynamic length keeps the 1-D op, and the loops decision recorded where it is
lowered says so. Transposed convolutions are left alone (torch-mlir lowers those otherwise).
"""

from __future__ import annotations

from torch_mlir import ir

from etc.passes.pass_api import Pass, register_pass
from etc.targets.cpu.ir_query import EDGE_CONVOLUTION, static_shape, walk



@register_pass
class Conv1dAs2d(Pass):
    """Rewrite static 1-D convolutions as 2-D ones of height 1 (module docstring)."""

    name = "etc-cpu-conv1d-as-2d"
    summary = "Rewrite 1-D convolutions as 2-D convolutions over a map of height 1 (the 2-D kernels take them)"

    def run(self, op) -> None:
        for conv in walk(op, (EDGE_CONVOLUTION,)):
            if self._one(conv):
                self.count("rewritten")

    def _one(self, conv) -> bool:
        from etc.dialects import decode_op
        from etc.dialects.aten import build_op
        from etc.dialects.edge import OPS as EDGE_OPS

        args = decode_op(conv)
        x, weight = args["input"], args["weight"]
        x_shape, w_shape, y_shape = static_shape(x), static_shape(weight), static_shape(conv.results[0])
        if args["transposed"] or w_shape is None or len(w_shape) != 3 or x_shape is None or y_shape is None:
            return False

        def with_height(value, shape):
            element = ir.RankedTensorType(value.type).element_type
            return build_op("aten::unsqueeze", {"self": value, "dim": 2},
                            [ir.RankedTensorType.get([*shape[:2], 1, *shape[2:]], element)],
                            dialect_ops=EDGE_OPS).results[0]

        def pair(key, new):  # aten.convolution takes one value for every dimension as well as one each
            values = [int(v) for v in args[key]]
            return [new, values[0] if values else new]

        y_type = ir.RankedTensorType(conv.results[0].type)
        with ir.InsertionPoint(conv), conv.location:
            args.update(input=with_height(x, x_shape), weight=with_height(weight, w_shape),
                        stride=pair("stride", 1), padding=pair("padding", 0), dilation=pair("dilation", 1),
                        output_padding=[0, 0])
            conv2d = build_op("aten::convolution", args,
                              [ir.RankedTensorType.get([*y_shape[:2], 1, y_shape[2]], y_type.element_type)],
                              loc=conv.location, dialect_ops=EDGE_OPS)
            flat = build_op("aten::squeeze.dim", {"self": conv2d.results[0], "dim": 2}, [y_type],
                            dialect_ops=EDGE_OPS)
        conv.results[0].replace_all_uses_with(flat.results[0])
        conv.erase()
        return True
