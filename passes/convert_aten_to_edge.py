"""etc-convert-aten-to-edge: rewrite every `aten` op into its `edge` op.

After torch's Core ATen decompositions, every op should have an edge form (the
edge dialect is the Core ATen opset). The rewrite keeps operands, attributes
(including discardable ones such as `etc.upper_bounds`) and locations; the edge
op's verifier then checks dtypes against what its kernel accepts. An op with no
edge form is an error at the user's source line that names the op and says what
to do about it, instead of surfacing later as a missing kernel on the device.
"""

from __future__ import annotations

from etc.errors import LoweringError


def edge_name_for(aten_name: str) -> str:
    return "edge." + aten_name.split(".", 1)[1]


def _torch_decomposes(torch_name: str) -> bool:
    """Does `to_edge`'s decomposition table (torch's Core ATen table plus etc's) cover the op?"""
    import torch

    from etc.compiler.decompositions import etc_decompositions

    namespace, _, rest = torch_name.partition("::")
    name, _, overload = rest.partition(".")
    try:
        target = getattr(getattr(getattr(torch.ops, namespace), name), overload or "default")
    except (AttributeError, RuntimeError):
        return False
    return target in torch.export.default_decompositions() or target in etc_decompositions()


def no_edge_form_message(torch_name: str) -> str:
    if _torch_decomposes(torch_name):
        return (f"'{torch_name}' is not in the Core ATen opset, so it has no edge form: etc.to_edge decomposes it "
                "(torch's decomposition table) before importing unless EdgeCompileConfig.preserve_ops keeps it, and "
                "a module imported without that step keeps it too; import the decomposed program (python -m "
                "etc.tools.import_model --decompose)")
    return (f"'{torch_name}' is not in the Core ATen opset and has no decomposition to it, so it has no edge form; "
            "add a decomposition (EdgeCompileConfig.decompositions) or delegate it to a backend "
            "that supports it")


def convert_aten_to_edge(module) -> int:
    """Convert in place; returns the number of ops rewritten. Raises LoweringError at the first op with no edge form."""
    from torch_mlir import ir

    from etc.ir.locations import format_location as render_location
    from etc.dialects import op_info

    context = module.context
    rewritten = 0
    to_convert = []

    def collect(op):
        if op.name.startswith("aten."):
            to_convert.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(collect)
    for op in to_convert:
        target = edge_name_for(op.name)
        if not context.is_registered_operation(target):
            info = op_info(op.name)
            torch_name = info.torch_name if info is not None else op.name
            raise LoweringError(no_edge_form_message(torch_name), location=render_location(op.location))
        with ir.InsertionPoint(op), op.location:
            attributes = {name: op.attributes[name] for name in op.attributes}
            new = ir.Operation.create(
                target,
                results=[r.type for r in op.results],
                operands=list(op.operands),
                attributes=attributes,
            )
        for old, repl in zip(op.results, new.results):
            old.replace_all_uses_with(repl)
        op.erase()
        rewritten += 1
    return rewritten


from etc.passes.pass_api import Pass, register_pass  # noqa: E402


@register_pass
class ConvertAtenToEdge(Pass):
    """Rewrite every aten op into the edge op of the same name (keeping operands, attributes and
    locations); an op without an edge form is a LoweringError at the user's line."""

    name = "etc-convert-aten-to-edge"
    summary = "Rewrite aten ops into their edge (Core ATen) ops"

    def run(self, op) -> None:
        self.count("rewritten", convert_aten_to_edge(op))
