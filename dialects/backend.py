"""The `backend` dialect: the executable form of a program after partitioning.

- `backend.delegate`: a call into a backend's compiled blob. Its operands are
  the partition's inputs, its results the partition's outputs (each in a
  numbered optional slot, `input_<i>` / `output_<i>`, at most `DELEGATE_SLOTS`); `callee` names
  the outlined private function it was made from (kept in the module for
  debugging and re-lowering), `backend_id` the runtime backend that runs it,
  `compile_specs` a dictionary of string-valued options. The emitter adds
  `etc.blob_index`, the delegate segment holding the blob.

Targets add their own fused ops by defining them on `Backend` before the
first context is made (`dialects.ext` registers only ops defined before a
dialect loads): see `define_backend_op`.
"""

from __future__ import annotations

from torch_mlir import ir

from etc.dialects import irdl_base


class Backend(irdl_base.Dialect, name="backend"):
    """Delegate calls and backend-specific ops."""


def _verify_delegate(op) -> bool:
    operation = op.operation
    for name in ("backend_id", "callee", "compile_specs"):
        if name not in operation.attributes:
            op.location.emit_error(f"'backend.delegate' needs a '{name}' attribute")
            return False
    if not isinstance(operation.attributes["backend_id"], ir.StringAttr) or \
            not ir.StringAttr(operation.attributes["backend_id"]).value:
        op.location.emit_error("'backend.delegate' needs a non-empty string 'backend_id'")
        return False
    if not isinstance(operation.attributes["callee"], ir.FlatSymbolRefAttr):
        op.location.emit_error("'backend.delegate' 'callee' must be a flat symbol reference to the outlined function")
        return False
    if not isinstance(operation.attributes["compile_specs"], ir.DictAttr):
        op.location.emit_error("'backend.delegate' 'compile_specs' must be a dictionary")
        return False
    return True


# IRDL binds one type per variadic group, and a partition's inputs and outputs
# have different shapes and dtypes: so they take numbered optional slots, as the
# aten tensor lists do. `op.operands` / `op.results` are the inputs / outputs in order.
DELEGATE_SLOTS = 64
INPUT_SLOTS = [f"input_{i}" for i in range(DELEGATE_SLOTS)]
OUTPUT_SLOTS = [f"output_{i}" for i in range(DELEGATE_SLOTS)]
DELEGATE_FIELDS = ([(name, irdl_base.OPTIONAL_OPERAND) for name in INPUT_SLOTS]
                   + [("backend_id", irdl_base.ATTRIBUTE), ("callee", irdl_base.ATTRIBUTE),
                      ("compile_specs", irdl_base.ATTRIBUTE)]
                   + [(name, irdl_base.OPTIONAL_RESULT) for name in OUTPUT_SLOTS])
DelegateOp = irdl_base.define_op(Backend, "delegate", "DelegateOp", DELEGATE_FIELDS, pure=False,
                                 verifier=_verify_delegate)


def define_backend_op(op_name: str, class_name: str, fields, *, pure: bool = True, verifier=None):
    """For targets: a backend-specific op (`backend.<op_name>`); call at import time."""
    return irdl_base.define_op(Backend, op_name, class_name, fields, pure=pure, verifier=verifier)


def delegate(inputs, result_types, backend_id: str, callee: str, compile_specs: dict[str, str], *, loc=None):
    """Build a `backend.delegate` at the current insertion point."""
    inputs, result_types = list(inputs), list(result_types)
    if len(inputs) > DELEGATE_SLOTS or len(result_types) > DELEGATE_SLOTS:
        raise ValueError(f"backend.delegate to '{callee}': {len(inputs)} inputs and {len(result_types)} outputs; "
                         f"at most {DELEGATE_SLOTS} of each fit (split the partition)")
    specs = ir.DictAttr.get({k: ir.StringAttr.get(v) for k, v in compile_specs.items()})
    values = {"backend_id": ir.StringAttr.get(backend_id), "callee": ir.FlatSymbolRefAttr.get(callee),
              "compile_specs": specs, **dict(zip(INPUT_SLOTS, inputs)), **dict(zip(OUTPUT_SLOTS, result_types))}
    return irdl_base.create(DelegateOp, DELEGATE_FIELDS, values, loc=loc)
