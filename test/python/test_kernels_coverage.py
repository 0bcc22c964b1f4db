"""Every Core ATen operator has a kernel, except a short documented list."""

from etc.runtime.kernels import registered_kernels
from etc.runtime.kernels.coverage import EXCLUDED, core_out_variants, missing_core_kernels


def test_every_core_aten_op_has_a_kernel_or_a_documented_exclusion():
    assert missing_core_kernels() == {}


def test_exclusions_are_few_have_reasons_and_are_really_core():
    assert len(EXCLUDED) <= 12
    bases = {core.rsplit(".", 1)[0] for core in core_out_variants()}
    for op, reason in EXCLUDED.items():
        assert reason and op in bases, op
        # an excluded op really has no kernel (else drop it from the list)
        assert not any(k.startswith(op + ".") for k in registered_kernels()), op


def test_core_ops_map_to_their_pte_out_variant_names():
    m = core_out_variants()
    assert m["aten::add.Tensor"] == "aten::add.out"
    assert m["aten::add.Scalar"] == "aten::add.Scalar_out"
    assert m["aten::slice.Tensor"] == "aten::slice_copy.Tensor_out"
    assert m["aten::max.dim"] == "aten::max.dim_max"
    assert m["aten::arange.start_step"] == "aten::arange.start_out"
    assert len(m) >= 180


def test_non_core_edge_ops_have_kernels():
    """The non-core ops the edge dialect admits (torch's decompositions keep them) run too."""
    import pytest
    edge = pytest.importorskip("etc.dialects.edge")
    emitter = pytest.importorskip("etc.compiler.emitter")
    missing = []
    for op in sorted(edge.EXTRA_EDGE_OPS):
        candidates = [op] if "." in op.split("::")[1] else [op, op + ".default"]
        outs = [o for o in (emitter.out_variant_name(c) for c in candidates) if o]
        if not outs or not any(o in registered_kernels() for o in outs):
            missing.append((op, outs))
    assert missing == []


def _load_executorch_op_namespaces():
    """Schemas of ExecuTorch's own namespaces (dim_order_ops, quantized_decomposed out variants), if installed."""
    import importlib
    for module in ("executorch.exir.passes.dim_order_ops_registry", "executorch.kernels.quantized"):
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - optional: those names are then skipped
            pass


def test_every_kernel_name_is_a_real_operator_with_a_matching_signature():
    """Registered names resolve to torch schemas, and each function takes the schema's arguments positionally."""
    import inspect
    import torch
    from etc.runtime.kernels import get_kernel

    _load_executorch_op_namespaces()
    unknown, mismatched = [], []
    for name in sorted(registered_kernels()):
        if name.startswith("test::"):
            continue
        ns, rest = name.split("::")
        op, overload = rest.split(".", 1)
        try:
            schema = getattr(getattr(getattr(torch.ops, ns), op), overload)._schema
        except (AttributeError, RuntimeError):
            if ns == "aten":
                unknown.append(name)
            continue
        fn = get_kernel(name).__wrapped__
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        has_varargs = any(p.kind == p.VAR_POSITIONAL for p in inspect.signature(fn).parameters.values())
        if not has_varargs and len(params) != len(schema.arguments):
            mismatched.append((name, len(params), len(schema.arguments)))
    assert unknown == []
    assert mismatched == []
