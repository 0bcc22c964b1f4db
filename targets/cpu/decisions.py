"""Which path each heavy op took through the cpu pipeline, written on the IR and read back.

Every contraction, convolution, window op (depthwise convolution, pooling) and reduction the
pipeline meets gets one decision: the tuned path it took (`gemm`, `window`, `row-reduction`,
...) or `loops` with the reason the tuned path could not take it. The passes that decide
append to the module attribute `etc.cpu.decisions` (an array of dictionaries, visible in
`etc-opt` output and checked by lit tests); `compile_function` reads them into the blob's
metadata, the delegation report prints them, and `etc inspect` shows them for a saved program.
Nothing falls back silently: an op that is not on its tuned path is a line with a reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from etc.ir.ops import as_operation

ATTR = "etc.cpu.decisions"
# On an op a pass already decided about (a row reduction etc-cpu-row-kernels left as loops, with
# its reason): the pass that would decide again about it (etc-cpu-default-loops) skips it and drops this.
DECIDED = "etc.cpu.decided"

# Paths that are not a fallback: the tuned code for that op kind, or a choice made by
# measurement (a contraction too small to pay for packing, a single-row GEMV read in place;
# attention: `flash` fused, `three-op` GEMM -> row softmax -> GEMM, each op on its tuned path;
# an epilogue that `broadcast`s the result over a larger shape runs as its own pass; a 3x3
# convolution as `winograd` F(2x2,3x3) or `direct`, by its channels and tiles).
TUNED_PATHS = frozenset({"gemm", "gemm-transposed", "window", "grouped", "small", "gemv", "row-reduction",
                         "column-reduction", "fused", "flash", "three-op", "pruned", "resize", "broadcast",
                         "winograd", "direct"})


@dataclass(frozen=True)
class Decision:
    kind: str  # contraction | convolution | window | reduction | epilogue | attention | resize
    op: str  # the linalg op name it was decided on
    path: str  # a TUNED_PATHS entry, or "loops"
    reason: str = ""  # why (always given for "loops")
    where: str = ""  # the user's source line when the op has one

    @property
    def tuned(self) -> bool:
        return self.path in TUNED_PATHS

    def __str__(self) -> str:
        head = f"{self.kind} {self.op}: {self.path}"
        if self.reason:
            head += f" ({self.reason})"
        return f"{head} at {self.where}" if self.where else head

    def to_json(self) -> dict:
        return {"kind": self.kind, "op": self.op, "path": self.path, "reason": self.reason, "where": self.where}

    @staticmethod
    def from_json(d: dict) -> "Decision":
        return Decision(d["kind"], d["op"], d["path"], d.get("reason", ""), d.get("where", ""))


def record(op, kind: str, path: str, reason: str = "") -> Decision:
    """Append a decision about `op` to its module's `etc.cpu.decisions`."""
    from torch_mlir import ir

    from etc.ir.locations import format_location

    if path not in TUNED_PATHS and not reason:
        raise ValueError(f"a '{path}' decision needs a reason")
    module = op
    while module.parent is not None:
        module = module.parent
    where = format_location(op.location) or ""
    decision = Decision(kind, op.name, path, reason, where if not where.startswith("'") else "")
    with op.context:
        entry = ir.DictAttr.get({k: ir.StringAttr.get(v) for k, v in decision.to_json().items() if v})
        existing = list(ir.ArrayAttr(module.attributes[ATTR])) if ATTR in module.attributes else []
        module.attributes[ATTR] = ir.ArrayAttr.get(existing + [entry])
    return decision


def record_taken(op, kind: str, path: str, found: list) -> None:
    """`op` took the tuned `path`: its decision, then those its match made about the ops around
    it (`found`: (op, kind, path, reason), e.g. a padding folded, a consumer fused or left alone)."""
    record(op, kind, path)
    for about, about_kind, about_path, reason in found:
        record(about, about_kind, about_path, reason)


def read(module) -> list[Decision]:
    """The decisions recorded on `module` (an ir.Module or its operation), in order."""
    from torch_mlir import ir

    op = as_operation(module)
    if ATTR not in op.attributes:
        return []
    out = []
    for entry in ir.ArrayAttr(op.attributes[ATTR]):
        d = ir.DictAttr(entry)
        fields = {k: ir.StringAttr(d[k]).value for k in ("kind", "op", "path", "reason", "where") if k in d}
        out.append(Decision.from_json(fields))
    return out


def summarize(decisions: list) -> list[str]:
    """Report lines: one per (kind, path, reason) with a count, fallbacks first."""
    counts: dict = {}
    for d in decisions:
        key = (not d.tuned, d.kind, d.path, d.reason)
        counts[key] = counts.get(key, 0) + 1
    lines = []
    for (fallback, kind, path, reason), n in sorted(counts.items(), key=lambda kv: (not kv[0][0], kv[0][1:])):
        text = f"{kind} -> {path}" + (f": {reason}" if reason else "") + f" x{n}"
        lines.append(("NOT TUNED  " if fallback else "tuned      ") + text)
    return lines
