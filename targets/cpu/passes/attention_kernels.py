"""etc-cpu-attention-kernels: softmax(Q K^T (op) mask) V as one fused kernel when the scores are large.

Runs on linalg on tensors before etc-cpu-gemm-kernels (which would make each contraction a GEMM
kernel). Each attention (`kernels/attention_match.py`: two batched contractions with a softmax over
the keys between them, the scale and additive masks -- what a bool or causal mask becomes -- as
elementwise ops on the scores) is one decision of kind `attention`:

- `flash` when it has at least `min-keys` keys: the fused kernel (`kernels/attention_kernel.py`),
  which never holds more than a [48, 128] slab of scores (one block of rows, one tile of keys);
- `three-op` otherwise, with the reason: below `min-keys` the scores of a head stay in cache and
  the GEMM -> row softmax -> GEMM path is as fast or faster (measured on AVX-512, one thread, same
  process: 0.95x the fused kernel's time at 128 keys, 0.99x at 197); or the pattern is one the
  kernel does not take (dynamic sequence length, a score op other than +, -, *, / with a float
  constant or tensor, the probabilities used elsewhere).

From 256 keys the fused kernel is as fast or faster (same measurement: 0.98x the three-op path's
time at 256 keys, 0.83x at 384, 0.84x causal at 256 and 0.56x causal at 512, its masked tiles
skipped) and needs a fraction of the scratch memory (Whisper-tiny's attention: 9 MB against 110 MB
of scores).

The three ops it replaces, and the producers only they read, are erased; Q, K^T, V and the masks
are the kernel's operands as the program computes them (the scaled Q, the transposed K).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir

from etc.ir.ops import as_operation, defining_op
from etc.passes.pass_api import Pass, option, register_pass
from etc.targets.cpu import decisions
from etc.targets.cpu.entry_args import entry_function
from etc.targets.cpu.kernel_ir import splice
from etc.targets.cpu.kernels.attention_kernel import Kernel
from etc.targets.cpu.kernels.attention_match import NotTaken, match
from etc.targets.cpu.kernels.row_match import RESHAPES


@register_pass
class AttentionKernels(Pass):
    """softmax(Q K^T (op) mask) V with many keys -> one flash-attention kernel (no score matrix).
    See the module docstring."""

    name = "etc-cpu-attention-kernels"
    summary = "Fuse long attention (QK^T, mask, softmax, times V) into one kernel that never stores the scores"

    @dataclass
    class Options:
        lanes: int = option(16, help="f32 vector lanes (16 AVX-512, 8 AVX2, 4 NEON/SSE)")
        registers: int = option(32, help="vector registers (what the query-row tile is sized by)")
        min_keys: int = option(256, help="fuse when the attention has at least this many keys (measured: "
                                              "bench/layers.py attn_* rows; below it the three-op path is faster)")

    def run(self, op) -> None:
        lanes = self.options.lanes
        if lanes < 2 or lanes & (lanes - 1):
            raise self.error(f"{self.name}: lanes must be a power of two of at least 2, got {lanes}", at=op)
        fn = entry_function(op)
        for o in [as_operation(x) for x in fn.regions[0].blocks[0].operations]:
            if o.name != "linalg.batch_matmul":
                continue
            try:
                found = match(o)
            except NotTaken as reason:
                decisions.record(o, "attention", "three-op", str(reason))
                self.count("not taken")
                continue
            if found is None:
                continue
            if found.keys < self.options.min_keys:
                decisions.record(o, "attention", "three-op",
                                 f"{found.keys} keys < min-keys={self.options.min_keys}: the scores stay in cache")
                self.count("small")
                continue
            text = Kernel(found, lanes, self.options.registers).function()
            decisions.record(o, "attention", "flash")
            try:
                (new,) = splice(text, [found.q, found.kt, found.v] + [s.value for s in found.sides], o)
            except Exception as exc:  # noqa: BLE001 - a rewrite that started must not fail silently
                raise self.error(f"{self.name}: building the attention kernel failed: {exc}\n{text}", at=o) from exc
            found.result.replace_all_uses_with(new)
            _erase(found.ops)
            self.count("taken")


def _erase(ops: list) -> None:
    """The pattern's ops, then whatever only they read that is pure (reshapes between them, their
    empties, fills and constants), until nothing more is dead."""
    erasable = ("tensor.empty", "linalg.fill", "arith.constant", *RESHAPES)
    candidates = list(ops)
    pattern = list(ops)
    changed = True
    while changed:
        changed = False
        for o in list(candidates):
            if any(True for r in o.results for _ in r.uses):
                continue
            if o not in pattern and o.name not in erasable:
                candidates.remove(o)
                continue
            for v in o.operands:
                owner = defining_op(v)
                if owner is not None and owner not in candidates:
                    candidates.append(owner)
            candidates.remove(o)
            if o in pattern:
                pattern.remove(o)
            o.erase()
            changed = True
    if pattern:
        raise RuntimeError("attention ops still in use after the kernel replaced them")
