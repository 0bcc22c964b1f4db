"""etc-cpu-gemm-kernels: every contraction becomes a call to a packed GEMM kernel, or a recorded decision.

The root of a dispatch region. It runs before elementwise fusion, so that no producer
(a norm, a gather, a dequantization) is fused into a contraction's operands, which turned
the Llama head's GEMM into one scalar loop nest 25x slower than the same Linear alone:
once this pass has run, the contraction is a `func.call` to a private kernel declaration
that `etc-cpu-fuse-elementwise` (the entry function only) cannot enter. The call carries the
contraction's geometry (`etc.cpu.gemm`); `etc-cpu-gemm-regions` defines the kernel with its
init and epilogue after fusion, and `etc-cpu-tile-gemm-kernels` inlines and tiles it.

For each `linalg.conv_2d_nchw_fchw` and each matmul-like contraction (named matmuls are
generalized first), in order:
  * taken: a call to a private declaration, `etc.cpu.gemm = "<geometry>"` on the call (the
    kernel of `kernels/gemm_kernel.py`: B packed in nr-wide column panels, an mr x nr
    accumulator in registers; transposed for convolutions with few output pixels);
  * not taken: left as it is, with the reason (`small`, `gemv` or `loops: <why>`).
Each is a decision in the module's `etc.cpu.decisions`. Other convolution layouts are
recorded as `loops` with their name. A failure while rewriting is an error, never a fallback.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import count

from torch_mlir import ir

from etc.passes.pass_api import Pass, option, register_pass
from etc.targets.cpu import decisions
from etc.targets.cpu.entry_args import entry_function
from etc.targets.cpu.isa import ISA_TABLE
from etc.targets.cpu.ir_query import walk
from etc.targets.cpu.kernel_ir import apply_transform_script
from etc.targets.cpu.kernels import gemm_match as gemm

# Convolutions the kernel does not take (depthwise ones are the window pass's; grouped ones, NGCHW
# with a GFCHW filter, etc-cpu-grouped-kernels' when the target vectorizes).
_GROUPED = ("linalg.conv_2d_ngchw_gfchw",)
_OTHER_CONVOLUTIONS = ("linalg.conv_1d_ncw_fcw", "linalg.conv_1d_nwc_wcf", "linalg.conv_2d_nhwc_hwcf",
                       "linalg.conv_2d_nhwc_fhwc", "linalg.conv_2d_ngchw_fgchw",
                       "linalg.conv_3d_ncdhw_fcdhw", "linalg.conv_3d_ndhwc_dhwcf", "linalg.conv_2d")

_NAMED_CONTRACTIONS = ("linalg.matmul", "linalg.batch_matmul", "linalg.batch_reduce_matmul", "linalg.matvec",
                       "linalg.vecmat", "linalg.batch_matvec", "linalg.batch_vecmat", "linalg.dot", "linalg.contract",
                       "linalg.mmt4d", "linalg.batch_mmt4d")


# The options' defaults are one row of isa.py's table (cpu_pipeline passes the target's own row):
# every default is a value a target uses.
_DEFAULT_ISA = ISA_TABLE["avx512"]


@dataclass
class TileOptions:
    """The register tile, shared by etc-cpu-gemm-kernels and etc-cpu-tile-gemm-kernels (isa.py's row;
    by default the AVX-512 one)."""

    lanes: int = option(_DEFAULT_ISA.lanes, help="f32 lanes of a vector register")
    mr: int = option(_DEFAULT_ISA.gemm_mr, help="rows of the register tile")
    nr: int = option(_DEFAULT_ISA.gemm_nr, help="columns of the register tile (a multiple of lanes)")
    kc: int = option(_DEFAULT_ISA.gemm_kc, help="K block: up to 1.5 kc accumulate in registers, longer K is split "
                     "into blocks")
    kc_strided: int = option(_DEFAULT_ISA.gemm_kc_strided, help="the shortest K block of a B read in place whose "
                             "panel rows (a row of B apart) alias in the cache (gemm.in_place_k_block)")
    l2_kib: int = option(_DEFAULT_ISA.l2_kib, help="per-core L2 in KiB: a K block of a B read in place keeps its "
                         "panel rows within half of it (gemm.in_place_k_block)")

    def kernel_config(self, **more) -> gemm.KernelConfig:
        """The tile as the kernels' KernelConfig (what the three GEMM passes build and tile by)."""
        return gemm.KernelConfig(self.lanes, self.mr, self.nr, self.kc, kc_strided=self.kc_strided,
                                 l2_bytes=1024 * self.l2_kib, **more)


@register_pass
class GemmKernels(Pass):
    """Rewrite contractions into packed GEMM kernels (see the module docstring)."""

    name = "etc-cpu-gemm-kernels"
    summary = "Contractions and convolutions -> packed, register-tiled GEMM kernels (roots of dispatch regions)"

    @dataclass
    class Options(TileOptions):
        min_flops: int = option(2 * 32 * 32 * 32, help="smaller contractions stay plain loops; 0 takes every one")

    def run(self, module_op) -> None:
        o = self.options
        if o.nr % o.lanes or o.mr < 1 or o.kc < 1:
            raise self.error(f"{self.name}: nr={o.nr} must be a multiple of lanes={o.lanes}, mr and kc positive")
        cfg = o.kernel_config(min_flops=o.min_flops)
        entry = entry_function(module_op)
        with module_op.context, ir.Location.unknown():
            if o.lanes == 1:
                self._no_vector_unit(module_op)
                return
            chosen = []
            for op in walk(module_op, ("linalg.conv_2d_nchw_fchw",)):
                g = gemm.match_conv(op)
                if g is None:
                    decisions.record(op, "convolution", "loops", "not static f32")
                    continue
                g.transposed = gemm.transpose_conv(g, cfg)
                chosen += self._decide(op, "convolution", g, cfg)
            for op in walk(module_op, _OTHER_CONVOLUTIONS):
                decisions.record(op, "convolution", "loops", f"{op.name} has no GEMM kernel")
            tags = self._rewrite(module_op, chosen, "c")
            self._generalize_contractions(module_op)
            chosen = []
            for op in walk(entry, ("linalg.generic",)):  # not the kernels just added (private functions)
                if not gemm.is_contraction(op) or decisions.DECIDED in op.attributes:  # decided before
                    continue
                g, why = gemm.match_generic(op)
                if g is None:
                    decisions.record(op, "contraction", "loops", why)
                    continue
                chosen += self._decide(op, "contraction", g, cfg)
            more = self._rewrite(module_op, chosen, "m")
            self.count("kernels", len(tags) + len(more))

    def _no_vector_unit(self, module_op) -> None:
        why = "the target has no vector unit the GEMM kernel is written for"
        for op in walk(module_op, ("linalg.conv_2d_nchw_fchw",) + _OTHER_CONVOLUTIONS + _GROUPED):
            decisions.record(op, "convolution", "loops", why)
        self._generalize_contractions(module_op)
        for op in walk(module_op, ("linalg.generic",)):
            if gemm.is_contraction(op) and decisions.DECIDED not in op.attributes:
                decisions.record(op, "contraction", "loops", why)

    def _generalize_contractions(self, module_op) -> None:
        """Named matmul-family ops -> linalg.generic (what `gemm.match_generic` reads); other
        named ops (windows, poolings) stay named for the passes that match them by name."""
        if not walk(module_op, _NAMED_CONTRACTIONS):
            return
        names = ", ".join(f'"{n}"' for n in _NAMED_CONTRACTIONS)
        script = ("module attributes {transform.with_named_sequence} {\n"
                  "  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {\n"
                  f"    %ops = transform.structured.match ops{{[{names}]}} in %root "
                  ": (!transform.any_op) -> !transform.any_op\n"
                  "    %g = transform.structured.generalize %ops : (!transform.any_op) -> !transform.any_op\n"
                  "    transform.yield\n  }\n}\n")
        try:
            apply_transform_script(module_op, script)
        except Exception as e:  # noqa: BLE001
            raise self.error(f"{self.name}: generalizing named contractions failed: {e}") from None

    def _decide(self, op, kind: str, g, cfg) -> list:
        skip = gemm.skip_reason(g, cfg, self.options.min_flops)
        if skip is not None:
            decisions.record(op, kind, *skip)
            if skip[0] == "gemv":
                gemm.read_b_in_place(g)
            return []
        if g.b_layout == "im2col" and gemm.b_in_place(g, cfg) and not gemm.gather_per_panel(g, cfg):
            decisions.record(op, kind, "gemm", f"the im2col whole, not per column panel: a {g.K} x {cfg.nr} "
                             f"panel buffer exceeds the {gemm.PANEL_STACK_BYTES} bytes of stack it may take")
        else:
            decisions.record(op, kind, "gemm-transposed" if g.transposed else "gemm", gemm.blocking(g, cfg))
        return [g]

    def _rewrite(self, module_op, gemms: list, kind: str) -> list:
        try:
            return _calls_to_kernels(module_op, gemms, kind)
        except Exception as e:  # noqa: BLE001 - a kernel that does not build is a compiler bug: say so
            raise self.error(f"{self.name}: building a GEMM kernel failed: {e}") from None


_KERNEL_NUMBERS = count(1)  # kernel names are unique in a process (a module may be compiled in parts)


def _calls_to_kernels(module_op, gemms: list, kind: str) -> list[str]:
    """Replace each contraction of `gemms` by a call to its kernel, a private declaration that
    etc-cpu-gemm-regions defines once it knows the kernel's init and epilogue; returns the
    kernels' names."""
    from torch_mlir.dialects import func as func_d

    body = module_op.regions[0].blocks[0]
    names = []
    for position, g in enumerate(gemms):
        name = f"etc_gemm_{kind}{next(_KERNEL_NUMBERS)}"
        with ir.InsertionPoint(body), ir.Location.unknown():
            func_d.FuncOp(name, ir.FunctionType.get([g.a.type, g.b.type, g.c.type], [g.result_type]),
                          visibility="private")
        with ir.InsertionPoint(g.op), g.op.location:
            call = func_d.CallOp([g.result_type], ir.FlatSymbolRefAttr.get(name), [g.a, g.b, g.c])
        call.operation.attributes[gemm.GEMM_ATTR] = gemm.describe(g)
        g.op.results[0].replace_all_uses_with(call.results[0])
        # A later contraction may read this one's result (MobileNetV2's projection 1x1 feeding
        # the next expansion): point it at the call before the op, and its value, are freed.
        for later in gemms[position + 1:]:
            for field_name in ("a", "b", "c"):
                if getattr(later, field_name) == g.op.results[0]:
                    setattr(later, field_name, call.results[0])
        g.op.erase()
        names.append(name)
    return names
