"""Which Core ATen operators have a kernel (in their out-variant / *_copy form).

`core_out_variants()` maps each Core ATen overload (ops tagged `torch.Tag.core`)
to the out-variant operator a `.pte` program calls; `missing_core_kernels()`
lists those without a registered kernel. Needs torch (imported lazily); the
runtime itself never imports this module.
"""

from __future__ import annotations

import functools

# Arguments an out variant drops: the out tensor carries dtype, layout and device.
_DROPPED = {"dtype", "layout", "device", "pin_memory"}

# Core ops that are not kernels, or that a portable numpy runtime deliberately leaves out, with why.
EXCLUDED = {
    # complex results: the .pte ScalarType of complex (8-10) is not implemented by ExecuTorch either
    "aten::_fft_r2c": "complex output dtype (no .pte complex ScalarType)",
    "aten::_fft_c2r": "complex input dtype (no .pte complex ScalarType)",
    # in-place storage resize: planned memory fixes every buffer; ExecuTorch resizes outputs
    # itself (the interpreter's job, not a kernel's), and export never leaves it in a graph
    "aten::resize_": "in-place storage resize: the runtime resizes planned tensors, no kernel",
}


def _arg_key(schema):
    return [(a.name, str(a.type)) for a in schema.arguments if not a.is_out and a.name not in _DROPPED]


def _has_out(schema) -> bool:
    return any(a.is_out for a in schema.arguments)


@functools.lru_cache(maxsize=None)
def core_out_variants() -> dict[str, str]:
    """{"aten::add.Tensor": "aten::add.out", ...} for every Core ATen overload ("" when torch has no out form)."""
    import torch

    result = {}
    # every registered aten operator (dir(torch.ops.aten) only lists the packets touched so far,
    # which made the Core list depend on what the process had imported before)
    names = sorted({n.split("::", 1)[1].split(".", 1)[0] for n in torch._C._dispatch_get_all_op_names()
                    if n.startswith("aten::")} | set(dir(torch.ops.aten)))
    for name in names:
        try:
            packet = getattr(torch.ops.aten, name)
            overloads = packet.overloads()
        except (AttributeError, RuntimeError):
            continue
        for overload in overloads:
            op = getattr(packet, overload)
            if torch.Tag.core not in op.tags:
                continue
            target = _out_form(torch, name, overload, op._schema)
            # ops whose out form has a different argument list (arange.start_step -> start_out)
            target = target or _SPECIAL_OUT.get(f"aten::{name}.{overload}", "")
            result[f"aten::{name}.{overload}" if overload != "default" else f"aten::{name}.default"] = target
    return result


_SPECIAL_OUT = {
    "aten::arange.start_step": "aten::arange.start_out",
    "aten::_to_copy.default": "aten::_to_copy.out",
    "aten::full.default": "aten::full.out",
    "aten::full_like.default": "aten::full_like.out",
    "aten::empty.memory_format": "aten::empty.out",
    "aten::empty_strided.default": "aten::empty_strided.out",
    "aten::scalar_tensor.default": "aten::scalar_tensor.out",
    "aten::rand.default": "aten::rand.out",
    "aten::randn.default": "aten::randn.out",
    "aten::randperm.default": "aten::randperm.out",
    # not out-variant kernels: called as they are, returning a Python scalar
    "aten::_local_scalar_dense.default": "aten::_local_scalar_dense.default",
    "aten::sym_size.int": "aten::sym_size.int",
    "aten::sym_numel.default": "aten::sym_numel.default",
    "aten::sym_is_contiguous.default": "aten::sym_is_contiguous.default",
    "aten::sym_stride.int": "aten::sym_stride.int",
    "aten::sym_storage_offset.default": "aten::sym_storage_offset.default",
}


def out_variant_of(packet_name: str, overload: str) -> str:
    """The out-variant operator name for `aten::<packet_name>.<overload>` ("" if torch has none)."""
    full = f"aten::{packet_name}.{overload}"
    core = core_out_variants()
    if full in core:
        return core[full]
    import torch

    return _out_form(torch, packet_name, overload, getattr(getattr(torch.ops.aten, packet_name), overload)._schema)


def _out_form(torch, name: str, overload: str, schema) -> str:
    """The out-variant operator of `aten::<name>.<overload>` (its `schema`) found by schema: itself
    if it has an out argument, else the first overload of `name` or `name_copy` with one and the
    same other arguments; "" if there is none."""
    if _has_out(schema):
        return f"aten::{name}.{overload}"
    key = _arg_key(schema)
    for candidate in (name, name + "_copy"):
        packet = getattr(torch.ops.aten, candidate, None)
        if packet is None:
            continue
        for candidate_overload in packet.overloads():
            other = getattr(packet, candidate_overload)._schema
            if _has_out(other) and _arg_key(other) == key:
                return f"aten::{candidate}.{candidate_overload}"
    return ""


def _base(op: str) -> str:
    return op.rsplit(".", 1)[0]


def missing_core_kernels(include_excluded: bool = False) -> dict[str, str]:
    """{core overload: out-variant name} for Core ATen overloads whose out variant has no kernel."""
    from etc.runtime.kernels import registered_kernels

    have = registered_kernels()
    missing = {}
    for core, out in sorted(core_out_variants().items()):
        if not include_excluded and _base(core) in EXCLUDED:
            continue
        if not out or out not in have:
            missing[core] = out
    return missing


def main():  # pragma: no cover - a report for humans
    missing = missing_core_kernels(include_excluded=True)
    total = len(core_out_variants())
    print(f"{total - len(missing)}/{total} Core ATen overloads have a kernel")
    for core, out in missing.items():
        why = EXCLUDED.get(_base(core), "")
        print(f"  {core} -> {out or '(no out variant)'}" + (f"  [{why}]" if why else ""))


if __name__ == "__main__":  # pragma: no cover
    main()
