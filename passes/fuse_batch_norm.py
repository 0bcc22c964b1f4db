"""etc-fuse-batch-norm: fold inference batch norm into the convolution before it.

    y = batch_norm(conv(x, W, b), gamma, beta, mean, var, eps)
      = conv(x, W * s, (b - mean) * s + beta)        with s = gamma / sqrt(var + eps)

per output channel. Done once at compile time on constant weights, it removes
a whole pass over the activation at every inference, on every path (portable
kernels and delegates alike). Applies when the convolution is not transposed,
its result feeds only the batch norm, the batch norm's statistics outputs are
unused, and every parameter is a constant. A pair whose parameters are
`#ml_program.extern` globals without their data (etc-opt on a printed program)
is left as it is with a warning saying so.
"""

from __future__ import annotations

import numpy as np

PASS_NAME = "etc-fuse-batch-norm"
SUMMARY = "Fold inference batch norm into the preceding convolution's weights"

BATCH_NORM = "edge.p_native_batch_norm_legit_no_training"
CONVOLUTION = "edge.convolution"


def fuse_batch_norm(module, warn=None) -> int:
    """Fuse in place; returns the number of batch norms removed. `warn(message, at)` hears of a
    pair left unfused because its weights' data is not in the IR."""
    from torch_mlir import ir

    from etc.dialects import decode_op
    from etc.dialects.aten import build_op
    from etc.dialects.edge import OPS as EDGE_OPS
    from etc.passes.constant_table import ConstantTable, module_body

    fused = 0
    table = ConstantTable(module)

    def constant(value):
        array = table.of_value(value)
        return array.astype(np.float64) if array is not None and array.dtype == np.float32 else None

    with module.context:
        for func in [op for op in module_body(module).operations if op.operation.name == "func.func"]:
            for bn in list(func.regions[0].blocks[0].operations):
                if bn.operation.name != BATCH_NORM or any(list(r.uses) for r in list(bn.results)[1:]):
                    continue
                bn_args = decode_op(bn)
                conv_value = bn_args["input"]
                conv = conv_value.owner
                if isinstance(conv, ir.Block) or conv.name != CONVOLUTION or len(list(conv_value.uses)) != 1:
                    continue
                conv_args = decode_op(conv)
                if conv_args["transposed"]:
                    continue
                weight = constant(conv_args["weight"])
                bias = constant(conv_args["bias"]) if conv_args["bias"] is not None else 0.0
                mean, var = constant(bn_args["running_mean"]), constant(bn_args["running_var"])
                gamma = constant(bn_args["weight"]) if bn_args["weight"] is not None else 1.0
                beta = constant(bn_args["bias"]) if bn_args["bias"] is not None else 0.0
                if any(a is None for a in (weight, bias, mean, var, gamma, beta)):
                    params = [conv_args["weight"], conv_args["bias"], bn_args["running_mean"],
                              bn_args["running_var"], bn_args["weight"], bn_args["bias"]]
                    if warn is not None and any(p is not None and table.without_data(p) for p in params):
                        warn("batch norm not fused into the convolution before it: their weights are "
                             "#ml_program.extern globals whose data is not in this IR (fusion happens in "
                             "etc.to_edge, which has the program's constants; a lit test writes them inline "
                             "as dense<...>)", bn)
                    continue
                scale = (gamma / np.sqrt(var.astype(np.float64) + bn_args["eps"])).astype(np.float64)
                new_weight = (weight * scale.reshape(-1, *[1] * (weight.ndim - 1))).astype(np.float32)
                new_bias = ((bias - mean) * scale + beta).astype(np.float32)
                new_bias = np.broadcast_to(new_bias, (weight.shape[0],)).copy()
                element = ir.RankedTensorType(conv_args["weight"].type).element_type
                with ir.InsertionPoint(bn), bn.location:
                    w_load = table.load("fused_bn_weight", new_weight, element)
                    b_load = table.load("fused_bn_bias", new_bias, element)
                    conv_args.update(weight=w_load, bias=b_load)
                    # Both nodes' locations: diagnostics keep pointing at the conv's line, and the
                    # compile record knows the value is the batch norm's (the last name).
                    fused_loc = ir.Location.fused([conv.location, bn.location])
                    new_conv = build_op("aten::convolution", conv_args, [conv_value.type], loc=fused_loc,
                                        dialect_ops=EDGE_OPS)
                    if "etc.upper_bounds" in conv.attributes:  # a dynamic result: the bound planning needs
                        new_conv.attributes["etc.upper_bounds"] = conv.attributes["etc.upper_bounds"]
                bn.results[0].replace_all_uses_with(new_conv.results[0])
                bn.erase()
                conv.erase()
                fused += 1
        if fused:
            table.drop_unused()
    return fused


from etc.passes.pass_api import Pass, register_pass  # noqa: E402


@register_pass
class FuseBatchNorm(Pass):
    name = PASS_NAME
    summary = SUMMARY

    def run(self, op) -> None:
        self.count("fused", fuse_batch_norm(op, warn=self.warning))
