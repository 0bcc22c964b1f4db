"""etc's MLIR dialects: `aten` (ATen overloads as imported), `edge` (Core ATen
with kernel dtype constraints), `backend` (delegate calls, target ops).

    ctx = etc.dialects.make_context()      # all three loaded, plus upstream dialects
    etc.dialects.load_dialects(ctx)        # idempotent
    etc.dialects.op_info("edge.add_tensor").torch_name   # "aten::add.Tensor"

Code outside this package never touches `torch_mlir.dialects.ext` directly:
`irdl_base.py` is the one place that does.
"""

from __future__ import annotations

from torch_mlir import ir

__all__ = ["make_context", "load_dialects", "op_info", "decode_op", "build_op", "OpInfo"]


def load_dialects(context: ir.Context | None = None) -> ir.Context:
    """Load aten, edge and backend into `context` (the current one by default); idempotent."""
    from etc.dialects import aten, backend, custom_ops, edge, irdl_base  # noqa: F401 (custom_ops: its ops)

    context = context or ir.Context.current
    for dialect in (aten.Aten, edge.Edge, backend.Backend):
        irdl_base.load(dialect, context)
    return context


def make_context() -> ir.Context:
    """A fresh context with etc's dialects and the upstream ones we use."""
    context = ir.Context()
    load_dialects(context)
    for name in ("func", "arith", "tensor", "ml_program", "linalg", "math", "scf", "memref", "builtin"):
        context.get_dialect_descriptor(name)
    return context


def op_info(name: str):
    """OpInfo for an op name (`aten.add_tensor`, `edge.add_tensor`), a torch name
    (`aten::add.Tensor`) or an operation (which a user's `custom_op` needs); None if there is none."""
    from etc.dialects.opinfo import by_torch_name, load_table

    if not isinstance(name, str):  # an operation: a user's custom_op knows its operator by attribute
        from etc.dialects import custom_ops

        if custom_ops.is_custom(name):
            return custom_ops.op_info_of(name)
        name = name.operation.name
    if "::" in name:
        return by_torch_name().get(name)
    dialect, _, op = name.partition(".")
    if dialect not in ("aten", "edge"):
        return None
    return _by_name().get(op)


def _by_name():
    global _BY_NAME
    if _BY_NAME is None:
        from etc.dialects.opinfo import load_table

        _BY_NAME = {info.name: info for info in load_table()}
    return _BY_NAME


_BY_NAME = None


def decode_op(op):
    from etc.dialects import custom_ops
    from etc.dialects.aten import decode_op as decode

    if custom_ops.is_custom(op):
        return custom_ops.decode(op)
    return decode(op)


def build_op(torch_name, arguments, result_types, *, loc=None):
    from etc.dialects.aten import build_op as build

    return build(torch_name, arguments, result_types, loc=loc)


def __getattr__(name):
    if name == "OpInfo":
        from etc.dialects.opinfo import OpInfo

        return OpInfo
    raise AttributeError(name)
