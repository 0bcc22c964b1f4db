"""etc-cpu-vector-to-llvm: convert-vector-to-llvm for a target whose `index` is not 64 bits wide.

Upstream's convert-vector-to-llvm converts memrefs with a 64-bit index whatever the target (it
builds its type converter without the data layout), while the pipeline's memref, arith, cf and
func conversions take the target's `index-bitwidth`. On a 32-bit target (Cortex-M) a vector load
then read a memref descriptor of i64 sizes that the rest of the module built with i32: the
lowering left `builtin.unrealized_conversion_cast`s and failed (the int8 kernels' vector loads hit
it). This pass does the same job with the width given:

1. the module's data layout (`dlti.dl_spec`) records `index` at `index-bitwidth` bits;
2. the vector-to-vector lowerings convert-vector-to-llvm applies before converting (transfers to
   loads and stores, masks, broadcasts, shape casts, transposes, contractions, gathers), as the
   upstream patterns, through the transform interpreter;
3. upstream's generic `convert-to-llvm{dynamic=true filter-dialects=vector}`, which builds its
   type converter from the data layout.

The cpu pipeline runs it instead of convert-vector-to-llvm on targets with a 32-bit index.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir

from etc.passes.pass_api import Pass, option, register_pass

DL_SPEC = "dlti.dl_spec"

_LOWERINGS = ("lower_bitcast", "lower_broadcast", "lower_contraction", "lower_masks", "lower_masked_transfers",
              "lower_shape_cast", "lower_interleave", "lower_transpose", "lower_transfer max_transfer_rank = 1",
              "transfer_permutation_patterns", "materialize_masks", "lower_gather", "rank_reducing_subview_patterns")


def _script() -> str:
    any_op = "!transform.any_op"
    patterns = "\n".join(f"      transform.apply_patterns.vector.{p}" for p in _LOWERINGS)
    return (f"module attributes {{transform.with_named_sequence}} {{\n"
            f"  transform.named_sequence @__transform_main(%root: {any_op} {{transform.readonly}}) {{\n"
            f"    %f = transform.structured.match ops{{[\"func.func\", \"llvm.func\"]}} in %root\n"
            f"        : ({any_op}) -> {any_op}\n"
            f"    transform.apply_patterns to %f {{\n{patterns}\n    }} : {any_op}\n"
            f"    transform.yield\n  }}\n}}\n")


@register_pass
class VectorToLLVM(Pass):
    name = "etc-cpu-vector-to-llvm"
    summary = "convert-vector-to-llvm with the target's index width (upstream's is always 64 bits)"

    @dataclass
    class Options:
        index_bitwidth: int = option(32, help="the width of index (the target's pointer width)")

    def run(self, module_op) -> None:
        from torch_mlir import passmanager
        from torch_mlir.dialects.transform import interpreter

        bits = self.options.index_bitwidth
        if bits not in (32, 64):
            raise self.error(f"{self.name}: index-bitwidth must be 32 or 64, got {bits}", at=module_op)
        with module_op.context, ir.Location.unknown():
            if DL_SPEC in module_op.attributes:
                raise self.error(f"{self.name}: the module already has a data layout", at=module_op)
            module_op.attributes[DL_SPEC] = ir.Attribute.parse(f"#dlti.dl_spec<index = {bits} : i64>")
            library = ir.Module.parse(_script())
            entry = library.body.operations[0]
            interpreter.apply_named_sequence(module_op, entry, library)
            passmanager.PassManager.parse(
                "builtin.module(convert-to-llvm{dynamic=true filter-dialects=vector})").run(module_op)
