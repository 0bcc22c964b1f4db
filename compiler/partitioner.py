"""The Partitioner API, shaped like ExecuTorch's: what a backend is given (`CompileSpec`,
`DelegationSpec`), what a partitioner returns (`Partition`, `PartitionResult`), what a backend's
compile half returns (`PreprocessResult`), the backend registry (`BackendDetails`,
`register_backend_details`), and `CapabilityPartitioner` (a partitioner from a per-op check) with
the cycle-free grouping it uses. `delegation.py` does the delegating with them; every name here is
importable from there too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from etc.errors import LoweringError
from etc.ir.ops import as_operation

__all__ = ["BACKENDS", "BackendDetails", "CapabilityPartitioner", "CompileSpec", "DelegationSpec", "IN_PLACE_OUTPUTS",
           "Partition", "PartitionResult", "Partitioner", "PreprocessResult", "group_cycle_free", "public_functions",
           "register_backend_details", "worth_delegating"]


@dataclass(frozen=True)
class CompileSpec:
    key: str
    value: bytes


@dataclass
class DelegationSpec:
    backend_id: str
    compile_specs: list = field(default_factory=list)


@dataclass
class Partition:
    """Ops of one method (in program order) that one backend takes as a single call."""

    ops: list
    spec: DelegationSpec


@dataclass
class PartitionResult:
    partitions: list  # of Partition
    # op name -> reason, for ops left on portable kernels.
    rejected: dict = field(default_factory=dict)
    # What the partitioner decided besides per-op support, with the reason (a fast path it could not
    # take): lines of the delegation report.
    decisions: list = field(default_factory=list)


@dataclass
class PreprocessResult:
    processed_bytes: bytes
    debug_info: dict = field(default_factory=dict)
    # Lines for the delegation report: what the backend decided inside the partition (the cpu
    # target: the path each contraction, window op and reduction took, and why).
    report_lines: list = field(default_factory=list)
    # The compiled code in the form the backend's `emit_library` builds a native library from (the
    # cpu target: its optimized LLVM module, argument layout and constants); None: no library.
    native: object = None


# On an outlined function: array<i64: k, j, ...>, result k is computed in argument j's memory.
IN_PLACE_OUTPUTS = "etc.in_place_outputs"


class BackendDetails:
    """A compile-time backend: `preprocess` turns an outlined function into a blob."""

    backend_id: str = ""
    # True when the backend's code is correct with an output in the same memory as the input it
    # replaces, for the pairs `etc.in_place_outputs` lists on the outlined function. `delegate()`
    # then gives a partition updating a mutable buffer (a KV cache's index_put) the buffer itself
    # as that output, instead of planned memory the program copies back into the buffer after
    # every call (see `_mark_in_place_outputs`).
    in_place_state: bool = False

    def preprocess(self, func_op, compile_specs: list, constants: dict) -> PreprocessResult:
        raise NotImplementedError

    def emit_library(self, plans: list, directory: str, name: str, **options):
        """Write the whole program as a native library (`EdgeProgram.to_library`): `plans` describe
        each method's one delegate call (compiler/library.py), whose `PreprocessResult.native` the
        backend kept. A backend that cannot build one says so."""
        raise LoweringError(f"backend '{self.backend_id}' cannot build a native library")


BACKENDS: dict[str, BackendDetails] = {}


def register_backend_details(backend: BackendDetails) -> BackendDetails:
    BACKENDS[backend.backend_id] = backend
    return backend


class Partitioner:
    """Decides what a backend takes. Subclass and implement `partition`.

    `pipeline`: passes `to_backend` runs on the program before `partition()`, rewriting it into the
    ops the backend takes (the cpu target folds each quantized computation into one op,
    `etc-fold-quantized`); the report shows it."""

    pipeline: str | None = None

    def partition(self, program_ir) -> PartitionResult:
        raise NotImplementedError


class CapabilityPartitioner(Partitioner):
    """A partitioner from a per-op capability check: `is_supported(op) -> (bool, reason)`.

    Groups supported ops into cycle-free partitions, largest first, in program
    order. A check that raises counts as "unsupported" with the exception as the
    reason: the compile goes on with the op on portable kernels.
    """

    def __init__(self, spec: DelegationSpec, is_supported: Callable):
        self.spec = spec
        self.is_supported = is_supported

    def _check(self, op) -> tuple[bool, str]:
        try:
            result = self.is_supported(op)
        except Exception as e:  # noqa: BLE001 - a partitioner must never crash the compile
            return False, f"support check failed: {type(e).__name__}: {e}"
        if isinstance(result, tuple):
            return bool(result[0]), str(result[1])
        return bool(result), "" if result else "not supported"

    def partition(self, program_ir) -> PartitionResult:
        result = PartitionResult(partitions=[])
        for func in public_functions(program_ir.module):
            ops = [op.operation for op in func.regions[0].blocks[0].operations]
            support = {}
            for op in ops:
                name = op.name
                if name in ("func.return",):
                    continue
                ok, reason = self._check(op)
                support[op] = ok
                if not ok:
                    result.rejected.setdefault(name, reason)
            for group in group_cycle_free(ops, lambda o: support.get(o, False)):
                result.partitions.append(Partition(ops=group, spec=self.spec))
        return result


def public_functions(module) -> list:
    from torch_mlir import ir

    funcs = []
    for op in module.body.operations:
        if op.operation.name != "func.func":
            continue
        if "sym_visibility" in op.attributes and ir.StringAttr(op.attributes["sym_visibility"]).value == "private":
            continue
        funcs.append(op)
    return funcs


def group_cycle_free(ops: list, supported: Callable) -> list[list]:
    """Group supported ops (a single block, in order) into partitions that create no cycle.

    An op joins the partition of one of its supported producers unless some path
    from that partition reaches the op through an op outside it (then fusing them
    would need the outside op both before and after the call). `outside[op]` holds
    the partitions that reach `op` through an outside op; `deps[op]` all partitions
    `op` depends on.
    """
    partition_of: dict = {}
    deps: dict = {}
    outside: dict = {}
    groups: list[list] = []
    for op in ops:
        producers = [v.owner for v in op.operands if not _is_block_arg(v)]
        producers = [as_operation(p) for p in producers]
        dep: set = set()
        out: set = set()
        for p in producers:
            dep |= deps.get(p, set())
            if p in partition_of:
                out |= outside.get(p, set())
                out |= deps.get(p, set()) - {partition_of[p]}
            else:
                out |= deps.get(p, set())
        if supported(op):
            choice = None
            for p in producers:
                if p in partition_of and partition_of[p] not in out:
                    choice = partition_of[p]
                    break
            if choice is None:
                choice = len(groups)
                groups.append([])
            groups[choice].append(op)
            partition_of[op] = choice
            dep = dep | {choice}
        deps[op] = dep
        outside[op] = out
    return [g for g in groups if worth_delegating(g)]


def worth_delegating(group: list) -> bool:
    """A partition of only constant loads or views does no work: leave it."""
    trivial = ("ml_program.global_load_const", "arith.constant")
    return any(op.name not in trivial for op in group)


def _is_block_arg(value) -> bool:
    from torch_mlir import ir

    return isinstance(value.owner, ir.Block)
