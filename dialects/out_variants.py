"""Which kernel runs an op: the out variant of each functional ATen overload (`aten::add.Tensor` ->
`aten::add.out`, as torchgen pairs them), the `_copy` kernels of the view ops, the quantization
ops' kernels, and the schema of a kernel name. The op table (opinfo) and the emitter read it.
"""

from __future__ import annotations

# Core ATen view ops have no out variant; ExecuTorch's edge dialect runs their
# `_copy` counterparts. When the memory planner placed the result on the input's
# storage, the copy is a no-op over the same bytes.
VIEW_COPY_KERNELS = {
    "aten::view": "aten::view_copy.out",
    "aten::_unsafe_view": "aten::view_copy.out",
    "aten::reshape": "aten::view_copy.out",
    "aten::permute": "aten::permute_copy.out",
    "aten::expand": "aten::expand_copy.out",
    "aten::slice.Tensor": "aten::slice_copy.Tensor_out",
    "aten::select.int": "aten::select_copy.int_out",
    "aten::unsqueeze": "aten::unsqueeze_copy.out",
    "aten::squeeze.dims": "aten::squeeze_copy.dims_out",
    "aten::squeeze.dim": "aten::squeeze_copy.dim_out",
    "aten::squeeze": "aten::squeeze_copy.out",
    "aten::alias": "aten::alias_copy.out",
    "aten::t": "aten::t_copy.out",
    "aten::transpose.int": "aten::transpose_copy.int_out",
    "aten::split_with_sizes": "aten::split_with_sizes_copy.out",
    "aten::split.Tensor": "aten::split_copy.Tensor_out",
    "aten::unbind.int": "aten::unbind_copy.int_out",
    "aten::diagonal": "aten::diagonal_copy.out",
    "aten::as_strided": "aten::as_strided_copy.out",
    "aten::detach": "aten::detach_copy.out",
}


def out_variant_name(torch_name: str) -> str | None:
    """`aten::add.Tensor` -> `aten::add.out` (from torch's schemas; views map to their `_copy` kernels)."""
    from etc.dialects import quantized_ops

    if torch_name in VIEW_COPY_KERNELS:
        return VIEW_COPY_KERNELS[torch_name]
    if quantized_ops.is_quantization_op(torch_name):  # ExecuTorch's quantized kernel names
        return quantized_ops.out_variants().get(torch_name)
    return out_variants().get(torch_name)


_OUT_VARIANTS: dict | None = None


def out_variants() -> dict:
    """Map every functional ATen overload to its out variant.

    The out variant has the same non-out arguments (names and types, in order)
    and one `out` tensor per return: that is how torchgen pairs them, and it
    keeps `add.Tensor -> add.out` apart from `add.Scalar -> add.Scalar_out`.
    """
    global _OUT_VARIANTS
    if _OUT_VARIANTS is None:
        import torch

        by_name: dict[str, list] = {}
        for schema in torch._C._jit_get_all_schemas():
            if schema.name.startswith("aten::"):
                by_name.setdefault(schema.name, []).append(schema)

        def signature(args):
            return [(a.name, str(a.type)) for a in args]

        # Factory functions take TensorOptions (dtype, layout, device, pin_memory)
        # that their out variants drop: the out tensor carries them.
        options = {"dtype", "layout", "device", "pin_memory"}

        table = {}
        for schemas in by_name.values():
            outs = [s for s in schemas if any(a.is_out for a in s.arguments)]
            for s in schemas:
                if any(a.alias_info is not None and a.alias_info.is_write for a in s.arguments):
                    continue
                for o in outs:
                    ins = [a for a in o.arguments if not a.is_out]
                    n_out = sum(a.is_out for a in o.arguments)
                    if n_out != len(s.returns):
                        continue
                    exact = signature(ins) == signature(s.arguments)
                    without_options = signature(ins) == signature(
                        [a for a in s.arguments if not (a.kwarg_only and a.name in options)])
                    if exact or without_options:
                        full = f"{s.name}.{s.overload_name}" if s.overload_name else s.name
                        table[full] = f"{o.name}.{o.overload_name}"
                        break
        _OUT_VARIANTS = table
    return _OUT_VARIANTS


def kernel_schema(qualified: str):
    """The torch FunctionSchema of an out-variant kernel name like `aten::add.out`."""
    import torch

    from etc.dialects import quantized_ops

    if qualified in quantized_ops.kernel_schemas():
        return quantized_ops.kernel_schemas()[qualified]
    name, _, overload = qualified.partition(".")
    namespace, _, op = name.partition("::")
    packet = getattr(getattr(torch.ops, namespace), op)
    return getattr(packet, overload or "default")._schema
