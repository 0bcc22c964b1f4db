"""Pictures where a user would rather look: the memory plan and the time per operator (`etc inspect --plot`).

- `memory_plan_rows(pte, method)`: every planned tensor of a method with its mem_id, byte
  range and lifetime (the instructions from the first that touches it to the last), read
  from the program alone; `plot_memory_plan` draws them, one panel per mem_id, each tensor
  a rectangle of its lifetime (x) against its bytes (y): overlaps in x are tensors alive
  together, so they must not overlap in y unless one is a view of the other.
- `plot_time_breakdown(inspector)`: the operators (and delegates) by total time, as bars.

matplotlib is the optional `etc[devtools]` dependency, imported here only (headless: Agg).
"""

from __future__ import annotations

from dataclasses import dataclass

from etc.errors import EtcError

__all__ = ["PlannedTensor", "memory_plan_rows", "plot_memory_plan", "plot_time_breakdown"]


@dataclass(frozen=True)
class PlannedTensor:
    value: int  # EValue index
    mem_id: int
    offset: int
    nbytes: int
    first: int  # first instruction that reads or writes it (-1: a method input, set before any)
    last: int  # last such instruction (the instruction count for a method output, read after all)


def _referenced(plan, index: int) -> list[int]:
    """The tensor EValues an argument stands for (a list's items, or itself)."""
    from etc.schema import program as S

    val = plan.values[index].val
    if isinstance(val, (S.TensorList, S.OptionalTensorList)):
        return [i for i in val.items or [] if i >= 0]
    return [index]


def memory_plan_rows(pte, method: str = "forward") -> list[PlannedTensor]:
    from etc.schema import element_size
    from etc.schema import program as S

    plan = next((p for p in pte.program.execution_plan if p.name == method), None)
    if plan is None:
        raise EtcError(f"the program has no method '{method}'")
    instructions = [i.instr_args for chain in plan.chains or [] for i in chain.instructions or []]
    first: dict = {}
    last: dict = {}
    for position, call in enumerate(instructions):
        if isinstance(call, (S.KernelCall, S.DelegateCall)):
            args = list(call.args or [])
        elif isinstance(call, S.MoveCall):
            args = [call.move_from, call.move_to]
        elif isinstance(call, S.JumpFalseCall):
            args = [call.cond_value_index]
        else:
            args = []
        for arg in args:
            for index in _referenced(plan, arg):
                first.setdefault(index, position)
                last[index] = position
    for index in plan.inputs or []:
        first[index] = -1
        last.setdefault(index, -1)
    for index in plan.outputs or []:
        first.setdefault(index, len(instructions))
        last[index] = len(instructions)
    rows = []
    for index, value in enumerate(plan.values or []):
        tensor = value.val
        if not isinstance(tensor, S.Tensor) or tensor.allocation_info is None or index not in first:
            continue
        info = tensor.allocation_info
        count = 1
        for size in tensor.sizes or []:
            count *= int(size)
        rows.append(PlannedTensor(value=index, mem_id=int(info.memory_id),
                                  offset=(int(info.memory_offset_high) << 32) | int(info.memory_offset_low),
                                  nbytes=count * element_size(tensor.scalar_type), first=first[index],
                                  last=last[index]))
    return rows


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise EtcError("plots need matplotlib: pip install 'etc[devtools]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_memory_plan(pte, path, method: str = "forward") -> None:
    plt = _pyplot()
    from matplotlib.patches import Rectangle

    rows = memory_plan_rows(pte, method)
    mem_ids = sorted({r.mem_id for r in rows})
    if not mem_ids:
        raise EtcError(f"method '{method}' plans no tensors: there is no memory plan to draw")
    plan = next(p for p in pte.program.execution_plan if p.name == method)
    sizes = list(plan.non_const_buffer_sizes or [0])
    figure, axes = plt.subplots(len(mem_ids), 1, figsize=(10, 3.5 * len(mem_ids)), squeeze=False)
    for ax, mem_id in zip(axes[:, 0], mem_ids):
        mine = [r for r in rows if r.mem_id == mem_id]
        for k, r in enumerate(mine):
            ax.add_patch(Rectangle((r.first, r.offset), r.last - r.first + 1, max(r.nbytes, 1),
                                   facecolor=plt.cm.tab20(k % 20), edgecolor="black", linewidth=0.3, alpha=0.8))
        ax.set_xlim(min(r.first for r in mine) - 0.5, max(r.last for r in mine) + 1.5)
        ax.set_ylim(0, max(sizes[mem_id] if mem_id < len(sizes) else 0, max(r.offset + r.nbytes for r in mine)))
        ax.set_xlabel("instruction")
        ax.set_ylabel("byte offset")
        ax.set_title(f"method '{method}', mem_id {mem_id}: {len(mine)} tensors, "
                     f"{sizes[mem_id] if mem_id < len(sizes) else '?'} bytes planned")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def plot_time_breakdown(inspector, path, top: int = 20) -> None:
    plt = _pyplot()
    ranked = inspector.top_ops(top)
    if not ranked:
        raise EtcError("the run record has no timed instruction to draw")
    names = [name for name, _, _ in ranked][::-1]
    totals = [ms for _, ms, _ in ranked][::-1]
    figure, ax = plt.subplots(figsize=(10, 0.4 * len(names) + 1.5))
    ax.barh(names, totals, color="tab:blue")
    ax.set_xlabel("total time over the recorded runs (ms)")
    ax.set_title("time per operator")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
