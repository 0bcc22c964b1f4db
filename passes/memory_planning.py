"""etc-memory-planning: place every planned tensor of each method in its memory pools.

The last pass before emission. For each public `func.func` (one per method) it
1. numbers the schedule: arguments are defined at step 0, the i-th op in
   execution order (nested regions in place, see "control flow" below) at step
   i + 1; a value lives from its definition to its last use; a returned value
   lives to the end;
2. decides what is planned: tensor op results, except values loaded from
   `ml_program` globals (they live in the constant segment or the state arena), results
   `etc-in-place-state` writes into a mutable buffer's storage, and, unless
   `alloc_graph_output`, returned values (their memory is supplied at execute);
   function arguments only with `alloc_graph_input` (ExecuTorch's default is
   that inputs are supplied at execute);
3. merges aliases: the result of a view op in `ALIAS_OPS` shares its input's
   storage when both are planned, so the pair is one allocation whose lifetime
   is the union. A view of unplanned memory (a constant, a runtime-supplied
   input) or a view that is itself an unplanned output is a copy instead, so
   planned storage never aliases memory the plan does not own;
4. asks `mem_id_for` which pool each allocation goes to (default 1);
5. runs the algorithm (`memory_planning_algorithms`) per pool and validates it;
6. writes the plan (ARCHITECTURE.md "Memory plan"): `etc.alloc` on every op
   with results and on planned arguments, `etc.buffer_sizes` and
   `etc.lower_bounds` on the function.

Dynamic tensors are planned at their upper bound (`etc.dim_bounds` on
arguments, `etc.upper_bounds` on ops); a tensor without a bound is an error.
The analysis reads only generic `ir.Operation` names, operands and results, so
it works for any dialect classes, registered or not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from etc.errors import MemoryPlanningError, PassError
from etc.ir.locations import format_location
from etc.passes.memory_planning_control_flow import (branch_local_yields, control_flow_last_uses,
                                                   extend_branch_results, flatten_regions)
from etc.passes.memory_planning_algorithms import (
    Interval,
    align_up,
    lower_bounds,
    pool_sizes,
    resolve_algorithm,
    run_algorithm,
)

PASS_NAME = "etc-memory-planning"

# Ops whose result may share the storage of operand 0: the result holds the same
# elements in the same contiguous order, only the shape differs. permute,
# transpose, t, expand, slice, select, diagonal, as_strided and the splits are
# deliberately absent: as a dense contiguous tensor (the .pte Tensor has no
# strides and storage_offset must be 0) their result orders or offsets the bytes
# differently from the input, so it needs its own buffer (the kernel copies).
_VIEW_OP_NAMES = (
    "view", "_unsafe_view", "unsafe_view", "reshape", "alias", "detach",
    "squeeze", "squeeze_dim", "squeeze_dims", "unsqueeze",
    "view_copy", "alias_copy", "detach_copy", "squeeze_copy", "squeeze_copy_dim", "squeeze_copy_dims",
    "unsqueeze_copy",
)
ALIAS_OPS: dict[str, int] = {
    **{f"{dialect}.{name}": 0 for dialect in ("aten", "edge") for name in _VIEW_OP_NAMES},
    "backend.view": 0,
}

# Results of these ops are constants or mutable state outside the planned arenas.
UNPLANNED_PRODUCERS = frozenset({"ml_program.global_load_const", "ml_program.global_load"})

DEFAULT_MEM_ID = 1


def _in_place_results(op) -> set:
    """Indices of op's results that etc-in-place-state gave a mutable buffer's storage (unplanned)."""
    if "etc.in_place_state" not in op.attributes:
        return set()
    from etc.passes.in_place_state import in_place_symbols

    return {n for n, symbol in enumerate(in_place_symbols(op)) if symbol is not None}


@dataclass
class ValueInfo:
    """What `mem_id_for` sees about one allocation (for an alias group: its storage owner).

    `kind` is "input", "output" (returned) or "intermediate"; `op_name` is None
    for inputs; `nbytes` is the aligned size at the upper bound of any dynamic
    dims; `start`/`end` are schedule steps (0 = arguments).
    """

    method: str
    value: Any
    kind: str
    op_name: str | None
    index: int
    shape: tuple
    element_type: str
    nbytes: int
    start: int
    end: int
    location: str


@dataclass
class PoolReport:
    mem_id: int
    planned_bytes: int
    lower_bound: int
    allocations: int

    @property
    def ratio(self) -> float:
        return self.planned_bytes / self.lower_bound if self.lower_bound else 1.0


@dataclass
class MethodPlan:
    """The plan of one method: per pool its size and lower bound, and each planned value's placement."""

    name: str
    pools: dict = field(default_factory=dict)  # mem_id -> PoolReport
    placements: list = field(default_factory=list)  # (ValueInfo, mem_id, offset)

    @property
    def buffer_sizes(self) -> list[int]:
        """As `etc.buffer_sizes` / `.pte` non_const_buffer_sizes: slot 0 reserved, then mem_id 1, 2, ..."""
        return [0] + [self.pools[m].planned_bytes if m in self.pools else 0 for m in range(1, self._top() + 1)]

    @property
    def lower_bounds(self) -> list[int]:
        return [0] + [self.pools[m].lower_bound if m in self.pools else 0 for m in range(1, self._top() + 1)]

    def _top(self) -> int:
        return max(self.pools, default=0)


@dataclass
class MemoryPlanReport:
    """What `plan_memory` did, per method and per mem_id; `str()` renders a table."""

    algorithm: str
    alignment: int
    alloc_graph_input: bool
    alloc_graph_output: bool
    methods: dict = field(default_factory=dict)  # name -> MethodPlan

    def total_planned_bytes(self) -> int:
        return sum(p.planned_bytes for m in self.methods.values() for p in m.pools.values())

    def total_lower_bound(self) -> int:
        return sum(p.lower_bound for m in self.methods.values() for p in m.pools.values())

    def to_dict(self) -> dict:
        """A JSON-friendly summary (for benchmarks)."""
        return {
            "algorithm": self.algorithm, "alignment": self.alignment,
            "alloc_graph_input": self.alloc_graph_input, "alloc_graph_output": self.alloc_graph_output,
            "methods": {name: {str(mem_id): {"planned_bytes": p.planned_bytes, "lower_bound": p.lower_bound,
                                             "allocations": p.allocations}
                               for mem_id, p in plan.pools.items()}
                        for name, plan in self.methods.items()},
        }

    def __str__(self) -> str:
        header = ("method", "mem_id", "planned bytes", "lower bound", "planned/bound", "allocations")
        rows = [(name, str(p.mem_id), f"{p.planned_bytes:,}", f"{p.lower_bound:,}", f"{p.ratio:.3f}",
                 str(p.allocations))
                for name, plan in self.methods.items() for p in sorted(plan.pools.values(), key=lambda p: p.mem_id)]
        rows += [(name, "-", "0", "0", "-", "0") for name, plan in self.methods.items() if not plan.pools]
        widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
        lines = [f"memory plan ({self.algorithm}, alignment {self.alignment}, "
                 f"alloc_graph_input={self.alloc_graph_input}, alloc_graph_output={self.alloc_graph_output})"]
        for r in [header] + rows:
            lines.append("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                                   for i, (cell, w) in enumerate(zip(r, widths))).rstrip())
        return "\n".join(lines)


# ------------------------------------------------------------------ helpers
def _where(location) -> str:
    """Where an error points: the user's line (`format_location`), else the raw location text."""
    return format_location(location) or str(location)


def _element_bytes(element_type, location) -> int:
    width = getattr(element_type, "width", None)
    if width is None:
        inner = getattr(element_type, "element_type", None)  # complex<f32>
        if inner is not None and getattr(inner, "width", None):
            return 2 * ((inner.width + 7) // 8)
        raise MemoryPlanningError(f"cannot size tensors of element type {element_type}", location=_where(location))
    return (width + 7) // 8


def _public_functions(target) -> list:
    """The public func.func ops of a module (or the one function given)."""
    from torch_mlir import ir

    operation = target.operation
    if operation.name == "func.func":
        return [operation]
    if operation.name != "builtin.module":
        raise MemoryPlanningError(f"memory planning runs on a module or a func.func, not on '{operation.name}'")
    functions = []
    for op in operation.regions[0].blocks[0].operations:
        if op.operation.name != "func.func":
            continue
        attrs = op.operation.attributes
        if "sym_visibility" in attrs and ir.StringAttr(attrs["sym_visibility"]).value == "private":
            continue  # outlined delegate bodies and helpers are not methods
        functions.append(op.operation)
    return functions


def _arg_dicts(func) -> list[dict]:
    from torch_mlir import ir

    count = len(func.regions[0].blocks[0].arguments)
    if "arg_attrs" not in func.attributes:
        return [{} for _ in range(count)]
    return [{named.name: named.attr for named in ir.DictAttr(d)} for d in ir.ArrayAttr(func.attributes["arg_attrs"])]


class _MethodAnalysis:
    """Schedule, lifetimes, sizes and alias groups of one function."""

    def __init__(self, func, *, alignment: int, alloc_graph_input: bool, alloc_graph_output: bool):
        from torch_mlir import ir

        self.ir = ir
        self.func = func
        self.name = ir.StringAttr(func.attributes["sym_name"]).value
        self.alignment = alignment
        block = func.regions[0].blocks[0]
        self.arguments = list(block.arguments)
        # Ops in execution order, nested regions in place (control flow: see `_control_flow`).
        self.ops, self.enclosing = flatten_regions(block)
        self.arg_dicts = _arg_dicts(func)
        self.end_step = len(self.ops)  # the terminator's step
        self.returned = []
        if self.ops and self.ops[-1].name == "func.return":
            self.returned = list(self.ops[-1].operands)
        self.infos: dict = {}  # ir.Value -> ValueInfo, planned values only
        self._collect(alloc_graph_input, alloc_graph_output)
        self._groups = self._alias_groups()

    # -- what is planned, and how big
    def _is_tensor(self, value) -> bool:
        if isinstance(value.type, self.ir.RankedTensorType):
            return True
        if isinstance(value.type, self.ir.UnrankedTensorType):
            raise MemoryPlanningError(f"cannot plan an unranked tensor ({value.type}) in method '{self.name}'",
                                      location=_where(self.func.location))
        return False

    def _planned_shape(self, value, bounds, where) -> tuple:
        """Static dims as they are; dynamic ones at their upper bound from `bounds` (None = no bound known)."""
        ty = self.ir.RankedTensorType(value.type)
        shape = []
        for d, size in enumerate(ty.shape):
            if not ty.is_dynamic_dim(d):
                shape.append(size)
                continue
            bound = bounds[d] if bounds is not None and d < len(bounds) else -1
            if bound < 0:
                raise MemoryPlanningError(
                    f"dimension {d} of a {ty} value in method '{self.name}' has no upper bound, so it cannot be "
                    "planned; give the dynamic dimension a max (torch.export.Dim(..., max=N))", location=_where(where))
            shape.append(bound)
        return tuple(shape)

    def _nbytes(self, value, shape, where) -> int:
        count = 1
        for size in shape:
            count *= size
        element_type = self.ir.RankedTensorType(value.type).element_type
        return align_up(count * _element_bytes(element_type, where), self.alignment)

    def _argument_bounds(self, index: int):
        attr = self.arg_dicts[index].get("etc.dim_bounds") if index < len(self.arg_dicts) else None
        if attr is None:
            return None
        flat = [int(x) for x in self.ir.DenseI64ArrayAttr(attr)]
        return flat[1::2]  # (min, max) pairs -> max

    def _result_bounds(self, op, result_number: int):
        if "etc.upper_bounds" not in op.attributes:
            return None
        flat = [int(x) for x in self.ir.DenseI64ArrayAttr(op.attributes["etc.upper_bounds"])]
        start = sum(self.ir.RankedTensorType(r.type).rank for r in list(op.results)[:result_number]
                    if isinstance(r.type, self.ir.RankedTensorType))
        return flat[start:]

    def _collect(self, alloc_graph_input: bool, alloc_graph_output: bool) -> None:
        last_use = control_flow_last_uses(self)
        returned = set(self.returned)
        for value in returned:
            last_use[value] = self.end_step
        extend_branch_results(self, last_use)

        if alloc_graph_input:
            for index, arg in enumerate(self.arguments):
                if not self._is_tensor(arg):
                    continue
                shape = self._planned_shape(arg, self._argument_bounds(index), self.func.location)
                self.infos[arg] = ValueInfo(
                    self.name, arg, "input", None, index, shape, str(arg.type.element_type),
                    self._nbytes(arg, shape, self.func.location), 0, last_use.get(arg, 0), _where(self.func.location))
        for step, op in enumerate(self.ops, start=1):
            if op.name in UNPLANNED_PRODUCERS:
                continue
            in_place = _in_place_results(op)
            for index, result in enumerate(op.results):
                if not self._is_tensor(result) or index in in_place:
                    continue  # (a result written into a mutable buffer's own storage: etc-in-place-state)
                is_output = result in returned
                if is_output and not alloc_graph_output and op.name != "scf.while":
                    continue  # (a loop's carries always need storage: the loop copies into them)
                shape = self._planned_shape(result, self._result_bounds(op, index), op.location)
                self.infos[result] = ValueInfo(
                    self.name, result, "output" if is_output else "intermediate", op.name, index, shape,
                    str(result.type.element_type), self._nbytes(result, shape, op.location),
                    step, max(step, last_use.get(result, step)), _where(op.location))

    # -- aliasing
    def _alias_groups(self) -> dict:
        """Planned value -> the storage owner of its alias group (union-find over ALIAS_OPS edges)."""
        parent = {value: value for value in self.infos}

        def find(value):
            while parent[value] != value:
                parent[value] = parent[parent[value]]
                value = parent[value]
            return value

        for op in self.ops:
            source_index = ALIAS_OPS.get(op.name)
            if source_index is None or len(op.results) != 1 or len(op.operands) <= source_index:
                continue
            source, result = op.operands[source_index], op.results[0]
            if source in self.infos and result in self.infos:
                # The source is defined first, so it stays the owner of the storage.
                parent[find(result)] = find(source)
        for result, value in branch_local_yields(self, find):
            parent[find(value)] = find(result)
        return {value: find(value) for value in self.infos}

    def allocations(self) -> dict:
        """Owner value -> its members (owner first, then in program order)."""
        groups: dict = {}
        for value in self.infos:  # insertion order is program order
            groups.setdefault(self._groups[value], []).append(value)
        return groups


# ------------------------------------------------------------------ the pass
def plan_memory(target, *, algorithm="greedy", alignment: int = 16, alloc_graph_input: bool = False,
                alloc_graph_output: bool = True, mem_id_for: Callable[[ValueInfo], int] | None = None
                ) -> MemoryPlanReport:
    """Plan every public function of `target` (an ir.Module, a module op or one func.func) in place.

    `algorithm` is "greedy", "naive" or `callable(intervals, alignment) -> {value_id: offset}`
    (validated: live values of one mem_id must not overlap). `mem_id_for(ValueInfo) -> int`
    picks each allocation's pool (1-based; default 1), e.g. to keep large
    activations in a slow pool. Returns a report of planned bytes and lower bound per method and mem_id.
    """
    from torch_mlir import ir

    algorithm_name, _ = resolve_algorithm(algorithm)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0:
        raise MemoryPlanningError(f"alignment must be a positive integer, got {alignment!r}")
    report = MemoryPlanReport(algorithm_name, alignment, alloc_graph_input, alloc_graph_output)
    operation = target.operation
    with operation.context:
        for func in _public_functions(target):
            analysis = _MethodAnalysis(func, alignment=alignment, alloc_graph_input=alloc_graph_input,
                                       alloc_graph_output=alloc_graph_output)
            plan, placement = _plan_method(analysis, algorithm, alignment, mem_id_for)
            _annotate(ir, analysis, placement, plan)
            report.methods[analysis.name] = plan
    return report


def _plan_method(analysis: _MethodAnalysis, algorithm, alignment: int, mem_id_for):
    intervals = []
    owners = {}  # interval value_id -> owner ValueInfo
    for group_id, (owner, members) in enumerate(analysis.allocations().items()):
        infos = [analysis.infos[v] for v in members]
        owner_info = analysis.infos[owner]
        mem_id = DEFAULT_MEM_ID if mem_id_for is None else mem_id_for(owner_info)
        if not isinstance(mem_id, int) or isinstance(mem_id, bool) or mem_id < 1:
            raise MemoryPlanningError(f"mem_id_for returned {mem_id!r} for a value of method '{analysis.name}'; "
                                      "mem_ids are integers >= 1 (0 is reserved)", location=owner_info.location)
        intervals.append(Interval(group_id, min(i.start for i in infos), max(i.end for i in infos),
                                  max(i.nbytes for i in infos), mem_id))
        owners[group_id] = members
    offsets = run_algorithm(algorithm, intervals, alignment)
    sizes, bounds = pool_sizes(intervals, offsets), lower_bounds(intervals)
    plan = MethodPlan(analysis.name)
    for mem_id in sorted(bounds):
        count = sum(1 for iv in intervals if iv.mem_id == mem_id)
        plan.pools[mem_id] = PoolReport(mem_id, sizes.get(mem_id, 0), bounds[mem_id], count)
    placement = {}  # value -> (mem_id, offset, nbytes)
    for iv in intervals:
        for value in owners[iv.value_id]:
            info = analysis.infos[value]
            placement[value] = (iv.mem_id, offsets[iv.value_id], info.nbytes)
            plan.placements.append((info, iv.mem_id, offsets[iv.value_id]))
    return plan, placement


def _annotate(ir, analysis: _MethodAnalysis, placement: dict, plan: MethodPlan) -> None:
    """Write the plan as attributes (stale ones from an earlier run are replaced or dropped)."""
    def entry(value):
        if value in placement:
            return ir.DenseI64ArrayAttr.get(list(placement[value]))
        return ir.UnitAttr.get()

    for op in analysis.ops:
        if len(op.results):
            op.attributes["etc.alloc"] = ir.ArrayAttr.get([entry(r) for r in op.results])
        elif "etc.alloc" in op.attributes:
            del op.attributes["etc.alloc"]
    if analysis.arguments:
        dicts = []
        for arg, attrs in zip(analysis.arguments, analysis.arg_dicts):
            attrs = {k: v for k, v in attrs.items() if k != "etc.alloc"}
            if arg in placement:
                attrs["etc.alloc"] = entry(arg)
            dicts.append(ir.DictAttr.get(attrs))
        analysis.func.attributes["arg_attrs"] = ir.ArrayAttr.get(dicts)
    analysis.func.attributes["etc.buffer_sizes"] = ir.DenseI64ArrayAttr.get(plan.buffer_sizes)
    analysis.func.attributes["etc.lower_bounds"] = ir.DenseI64ArrayAttr.get(plan.lower_bounds)


# --------------------------------------------------------------- pass options
def options_from_strings(options: dict) -> dict:
    """Pass-pipeline options (`algorithm=naive alignment=64 alloc-graph-input=true`) -> plan_memory
    kwargs, scanned as every pass's options are (`pass_api.parse_options` on the pass's Options)."""
    try:
        parsed = parse_options(MemoryPlanningPass.Options, options, PASS_NAME)
    except PassError as error:
        raise MemoryPlanningError(error.message) from None
    given = {key.replace("-", "_") for key in options}
    return {name: getattr(parsed, name) for name in ("algorithm", "alignment", "alloc_graph_input",
                                                     "alloc_graph_output") if name in given}


def run_memory_planning_pass(module, options: dict | None = None) -> MemoryPlanReport:
    """The pass body as the pass manager calls it: string options, module in place."""
    return plan_memory(module, **options_from_strings(options or {}))


# ------------------------------------------------------- registered pass
from etc.passes.pass_api import Pass, option, parse_options, register_pass  # noqa: E402


@register_pass
class MemoryPlanningPass(Pass):
    """Place every planned tensor of each public function in its memory pools and write
    the plan as `etc.alloc` / `etc.buffer_sizes` attributes (ARCHITECTURE.md "Memory plan")."""

    name = PASS_NAME
    summary = "Plan the memory of every method: lifetimes, aliases, offsets in mem_id pools"

    @dataclass
    class Options:
        algorithm: str = option("greedy", help="placement algorithm (greedy, naive)")
        alignment: int = option(16, help="byte alignment of every allocation")
        alloc_graph_input: bool = option(False, help="plan the method inputs too")
        alloc_graph_output: bool = option(True, help="plan the method outputs too")
        report: bool = option(False, help="print the plan report to stderr as // comments")

    def run(self, op) -> None:
        import sys

        options = self.options
        report = plan_memory(op, algorithm=options.algorithm, alignment=options.alignment,
                             alloc_graph_input=options.alloc_graph_input,
                             alloc_graph_output=options.alloc_graph_output)
        self.report = report
        if options.report:
            print("\n".join("// " + line for line in str(report).splitlines()), file=sys.stderr)


def main(argv=None) -> int:
    """`python -m etc.passes.memory_planning FILE [key=value ...]`: plan a textual module, print it and the report.

    A standalone driver for debugging plans (and lit tests) that needs no pass
    registry: options are the pass options, e.g. `algorithm=naive alignment=64`.
    The report goes to stdout as `//` comment lines after the module.
    """
    import sys

    from torch_mlir import ir

    from etc.errors import EtcError

    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print("usage: python -m etc.passes.memory_planning FILE|- [algorithm=...] [alignment=N] "
              "[alloc-graph-input=BOOL] [alloc-graph-output=BOOL]", file=sys.stderr)
        return 2
    path, option_args = args[0], args[1:]
    try:
        options = dict(arg.split("=", 1) for arg in option_args)
    except ValueError:
        print(f"error: options are key=value, got {option_args}", file=sys.stderr)
        return 2
    context = ir.Context()
    context.allow_unregistered_dialects = True
    try:
        with context:
            # parseFile keeps the file name in locations, so errors point at FILE:line:col.
            module = ir.Module.parse(sys.stdin.read()) if path == "-" else ir.Module.parseFile(path)
            report = run_memory_planning_pass(module, options)
    except EtcError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(module)
    print("\n".join("// " + line for line in str(report).splitlines()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


# ------------------------------------------------------------------ reading the plan
def planned_alloc(attr) -> tuple[int, int] | None:
    """An `etc.alloc` entry -> (mem_id, offset), or None where not planned."""
    from torch_mlir import ir

    if attr is None or isinstance(attr, ir.UnitAttr) or str(attr) == "unit":
        return None
    values = [int(x) for x in ir.DenseI64ArrayAttr(attr)]
    return values[0], values[1]


def result_alloc(op, n: int):
    """The (mem_id, offset) the plan gave result `n` of `op`, or None where not planned."""
    from torch_mlir import ir

    if "etc.alloc" not in op.attributes:
        return None
    return planned_alloc(ir.ArrayAttr(op.attributes["etc.alloc"])[n])
