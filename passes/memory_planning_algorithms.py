"""Memory planning algorithms on plain lifetime intervals (no MLIR here).

An `Interval` is one allocation: it is live on instructions `start..end`
(inclusive) and needs `size` bytes in the pool `mem_id`. An algorithm maps each
interval's `value_id` to a byte offset inside its pool such that two intervals of
the same pool that are live at a common instruction never share a byte.

Why a separate module: the planning problem is pure arithmetic, so it can be
tested exhaustively on random interval sets, and a user can plug in their own
algorithm with the same signature, `algorithm(intervals, alignment) -> {value_id:
offset}`, which `run_algorithm` validates before anything trusts it.

Algorithms:
- `naive`: every interval gets its own bytes (no reuse). The upper bound.
- `greedy`: several reuse strategies, the smallest plan wins (see `greedy`).

`lower_bounds` gives, per pool, the largest sum of live bytes at any
instruction: no plan can be smaller, which is what the planner reports next to
the planned size.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Hashable, Iterable

from etc.errors import MemoryPlanningError

Offsets = dict  # value_id -> byte offset inside its mem_id's pool
Algorithm = Callable[[list, int], Offsets]


@dataclass(frozen=True)
class Interval:
    """One allocation: live on instructions start..end inclusive, `size` bytes in pool `mem_id` (1-based)."""

    value_id: Hashable
    start: int
    end: int
    size: int
    mem_id: int = 1

    def overlaps_in_time(self, other: "Interval") -> bool:
        return self.start <= other.end and other.start <= self.end


def align_up(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def check_intervals(intervals: Iterable[Interval], alignment: int) -> list[Interval]:
    """Reject malformed input early, with the offending interval in the message."""
    if not isinstance(alignment, int) or alignment <= 0:
        raise MemoryPlanningError(f"alignment must be a positive integer, got {alignment!r}")
    intervals = list(intervals)
    seen = set()
    for iv in intervals:
        if iv.value_id in seen:
            raise MemoryPlanningError(f"value {iv.value_id!r} appears in more than one interval")
        seen.add(iv.value_id)
        if iv.end < iv.start:
            raise MemoryPlanningError(f"interval of value {iv.value_id!r} ends ({iv.end}) before it starts ({iv.start})")
        if iv.size < 0:
            raise MemoryPlanningError(f"interval of value {iv.value_id!r} has a negative size {iv.size}")
        if not isinstance(iv.mem_id, int) or iv.mem_id < 1:
            raise MemoryPlanningError(f"value {iv.value_id!r} has mem_id {iv.mem_id!r}; mem_ids are integers >= 1 "
                                      "(0 is reserved by the .pte format)")
    return intervals


def by_pool(intervals: Iterable[Interval]) -> dict[int, list[Interval]]:
    pools: dict[int, list[Interval]] = defaultdict(list)
    for iv in intervals:
        pools[iv.mem_id].append(iv)
    return dict(pools)


def lower_bounds(intervals: Iterable[Interval]) -> dict[int, int]:
    """Per mem_id, the largest sum of sizes live at one instruction (a sweep over start/end events)."""
    bounds = {}
    for mem_id, pool in by_pool(intervals).items():
        events = []
        for iv in pool:
            events.append((iv.start, 0, iv.size))      # starts sort before ends at the same instruction,
            events.append((iv.end + 1, -1, -iv.size))  # and an end frees after its last instruction
        live = peak = 0
        for _, _, delta in sorted(events, key=lambda e: (e[0], e[1])):
            live += delta
            peak = max(peak, live)
        bounds[mem_id] = peak
    return bounds


def pool_sizes(intervals: Iterable[Interval], offsets: Offsets) -> dict[int, int]:
    """Per mem_id, the bytes a plan needs: the highest end of any placed interval."""
    sizes: dict[int, int] = {}
    for iv in intervals:
        sizes[iv.mem_id] = max(sizes.get(iv.mem_id, 0), offsets[iv.value_id] + iv.size)
    return sizes


def validate_plan(intervals: list[Interval], offsets: Offsets, alignment: int) -> None:
    """Raise MemoryPlanningError unless every interval has an aligned offset and no two live ones collide."""
    for iv in intervals:
        if iv.value_id not in offsets:
            raise MemoryPlanningError(f"the memory plan gives no offset for value {iv.value_id!r}")
        offset = offsets[iv.value_id]
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise MemoryPlanningError(f"the memory plan gives value {iv.value_id!r} the invalid offset {offset!r}")
        if offset % alignment:
            raise MemoryPlanningError(f"the memory plan puts value {iv.value_id!r} at offset {offset}, "
                                      f"which is not a multiple of the alignment {alignment}")
    for mem_id, pool in by_pool(intervals).items():
        active: list[Interval] = []
        for iv in sorted(pool, key=lambda i: i.start):
            active = [a for a in active if a.end >= iv.start]
            lo, hi = offsets[iv.value_id], offsets[iv.value_id] + iv.size
            for other in active:
                o_lo = offsets[other.value_id]
                if iv.size and other.size and lo < o_lo + other.size and o_lo < hi:
                    raise MemoryPlanningError(
                        f"the memory plan overlaps values {other.value_id!r} (bytes {o_lo}..{o_lo + other.size}, "
                        f"live {other.start}..{other.end}) and {iv.value_id!r} (bytes {lo}..{hi}, "
                        f"live {iv.start}..{iv.end}) in mem_id {mem_id}")
            active.append(iv)


# ------------------------------------------------------------------ naive
def naive(intervals: list[Interval], alignment: int) -> Offsets:
    """No reuse: each pool is the concatenation of its intervals in program order."""
    offsets = {}
    tops: dict[int, int] = defaultdict(int)
    for iv in sorted(intervals, key=lambda i: (i.start, i.end)):
        offsets[iv.value_id] = tops[iv.mem_id]
        tops[iv.mem_id] += align_up(iv.size, alignment)
    return offsets


# ----------------------------------------------------------------- greedy
def _interference(pool: list[Interval]) -> dict[Hashable, list[Interval]]:
    """For each interval, the intervals live at some common instruction (a sweep; O(n + edges))."""
    neighbours: dict[Hashable, list[Interval]] = {iv.value_id: [] for iv in pool}
    active: list[Interval] = []
    for iv in sorted(pool, key=lambda i: i.start):
        active = [a for a in active if a.end >= iv.start]
        for other in active:
            neighbours[iv.value_id].append(other)
            neighbours[other.value_id].append(iv)
        active.append(iv)
    return neighbours


def _place_in_gaps(size: int, taken: list[tuple[int, int]], alignment: int, best_fit: bool) -> int:
    """The offset for `size` bytes avoiding the byte ranges `taken`: the tightest gap, or the lowest one."""
    chosen, chosen_slack = None, None
    cursor = 0
    for lo, hi in sorted(taken):
        if lo - cursor >= size:
            slack = lo - cursor - size
            if chosen is None or (best_fit and slack < chosen_slack):
                chosen, chosen_slack = cursor, slack
                if not best_fit:
                    return chosen
        cursor = max(cursor, align_up(hi, alignment))
    return cursor if chosen is None else chosen


def _fit_in_order(order: list[Interval], neighbours, alignment: int, best_fit: bool) -> Offsets:
    offsets: Offsets = {}
    for iv in order:
        taken = [(offsets[n.value_id], offsets[n.value_id] + n.size)
                 for n in neighbours[iv.value_id] if n.value_id in offsets and n.size]
        offsets[iv.value_id] = _place_in_gaps(align_up(iv.size, alignment), taken, alignment, best_fit)
    return offsets


# Orders to place intervals in; the smallest result wins. Largest-first is the
# classic best-fit order (ExecuTorch's greedy), program order suits chains of
# growing tensors, longest-lived-first keeps long residents out of the way.
GREEDY_ORDERS: dict[str, Callable[[Interval], tuple]] = {
    "size": lambda i: (-i.size, i.start, i.end),
    "start": lambda i: (i.start, -i.size),
    "lifetime": lambda i: (-(i.end - i.start), -i.size, i.start),
    "area": lambda i: (-(i.end - i.start + 1) * i.size, i.start),
}


def _two_sided(pool: list[Interval], neighbours, alignment: int) -> Offsets | None:
    """Exact plan when at most two intervals are ever live together (chain-shaped graphs).

    Then the interference graph is an interval graph without triangles, so a
    forest, so two-colourable: one colour goes at offset 0, the other against the
    top of a pool of exactly the lower bound. Two neighbours are live together at
    some instruction, so their sizes add up to at most the bound: no collision.
    """
    if _max_live_count(pool) > 2:
        return None
    sizes = {iv.value_id: align_up(iv.size, alignment) for iv in pool}
    bound = _aligned_lower_bound(pool, alignment)
    colour: dict[Hashable, int] = {}
    for root in pool:
        if root.value_id in colour or not root.size:
            continue
        colour[root.value_id] = 0
        stack = [root]
        while stack:
            iv = stack.pop()
            for n in neighbours[iv.value_id]:
                if n.size and n.value_id not in colour:
                    colour[n.value_id] = 1 - colour[iv.value_id]
                    stack.append(n)
    return {iv.value_id: bound - sizes[iv.value_id] if colour.get(iv.value_id) == 1 else 0 for iv in pool}


def _max_live_count(pool: list[Interval]) -> int:
    events = sorted([(iv.start, 1) for iv in pool if iv.size] + [(iv.end + 1, -1) for iv in pool if iv.size],
                    key=lambda e: (e[0], e[1]))
    live = peak = 0
    for _, delta in events:
        live += delta
        peak = max(peak, live)
    return peak


def _aligned_lower_bound(pool: list[Interval], alignment: int) -> int:
    aligned = [Interval(iv.value_id, iv.start, iv.end, align_up(iv.size, alignment), iv.mem_id) for iv in pool]
    return lower_bounds(aligned).get(pool[0].mem_id, 0) if pool else 0


def _compress_time(pool: list[Interval]) -> dict[int, int]:
    """Map every start/end to a dense index; the order, so every overlap relation, is kept."""
    points = sorted({iv.start for iv in pool} | {iv.end for iv in pool})
    return {point: index for index, point in enumerate(points)}


def _executorch_buckets(pool: list[Interval], alignment: int, overlap_within_buckets: bool) -> Offsets:
    """ExecuTorch's greedy (exir/memory_planning.py), re-derived from its documented rules.

    Largest first. A value goes at offset 0 of the first bucket none of whose
    values is live at the same time; failing that (with
    `overlap_within_buckets`, ExecuTorch's default) just above the values it
    meets in the first bucket where that still fits; failing that, into a new
    bucket of its own size. Buckets are laid out one after another. Kept as a
    candidate so that `greedy` is never worse than ExecuTorch on the same
    lifetimes. Per bucket, `top[t]` is the highest byte used at time t and
    `count[t]` how many values are live, so each test is a slice, not a scan.
    """
    import numpy as np

    time = _compress_time(pool)
    steps = len(time)
    buckets: list[dict] = []  # {"size", "top": ndarray, "count": ndarray}
    placed: dict[Hashable, tuple[int, int]] = {}  # value_id -> (bucket, offset inside it)
    for iv in sorted(pool, key=lambda i: -i.size):
        size = align_up(iv.size, alignment)
        lo, hi = time[iv.start], time[iv.end] + 1
        choice = next(((k, 0) for k, b in enumerate(buckets) if not b["count"][lo:hi].any()), None)
        if choice is None and overlap_within_buckets:
            for k, b in enumerate(buckets):
                below = int(b["top"][lo:hi].max())
                if below > 0 and below + size <= b["size"]:
                    choice = (k, below)
                    break
        if choice is None:
            buckets.append({"size": size, "top": np.zeros(steps, dtype=np.int64),
                            "count": np.zeros(steps, dtype=np.int64)})
            choice = (len(buckets) - 1, 0)
        bucket = buckets[choice[0]]
        bucket["count"][lo:hi] += 1
        bucket["top"][lo:hi] = np.maximum(bucket["top"][lo:hi], choice[1] + size)
        placed[iv.value_id] = choice
    bases, total = [], 0
    for bucket in buckets:
        bases.append(total)
        total += bucket["size"]
    return {value_id: bases[k] + offset for value_id, (k, offset) in placed.items()}


def greedy_candidates(pool: list[Interval], alignment: int) -> dict[str, Offsets]:
    """Every strategy's plan for one pool, by name (for `greedy` and for inspection in tests)."""
    neighbours = _interference(pool)
    plans: dict[str, Offsets] = {}
    for name, key in GREEDY_ORDERS.items():
        order = sorted(pool, key=key)
        plans[f"best-fit/{name}"] = _fit_in_order(order, neighbours, alignment, best_fit=True)
        plans[f"first-fit/{name}"] = _fit_in_order(order, neighbours, alignment, best_fit=False)
    two_sided = _two_sided(pool, neighbours, alignment)
    if two_sided is not None:
        plans["two-sided"] = two_sided
    plans["executorch-buckets"] = _executorch_buckets(pool, alignment, overlap_within_buckets=True)
    plans["executorch-buckets/no-overlap"] = _executorch_buckets(pool, alignment, overlap_within_buckets=False)
    return plans


def greedy(intervals: list[Interval], alignment: int) -> Offsets:
    """Reuse memory: per pool, the smallest of several greedy plans (ties go to the first strategy).

    Strategies: best-fit and first-fit gap placement in several orders, an exact
    two-sided plan when at most two values are live together, and ExecuTorch's
    bucket greedy (so never worse than it on the same intervals). Reaches the lower bound on chain-shaped graphs.
    """
    offsets: Offsets = {}
    for mem_id, pool in by_pool(intervals).items():
        plans = greedy_candidates(pool, alignment)
        best = min(plans.values(), key=lambda plan: pool_sizes(pool, plan).get(mem_id, 0))
        offsets.update(best)
    return offsets


ALGORITHMS: dict[str, Algorithm] = {"naive": naive, "greedy": greedy}


def resolve_algorithm(algorithm) -> tuple[str, Algorithm]:
    """A name from ALGORITHMS or a callable -> (display name, function)."""
    if callable(algorithm):
        return getattr(algorithm, "__name__", "custom"), algorithm
    if algorithm in ALGORITHMS:
        return algorithm, ALGORITHMS[algorithm]
    raise MemoryPlanningError(f"unknown memory planning algorithm {algorithm!r}; choose one of "
                              f"{', '.join(sorted(ALGORITHMS))} or pass a callable(intervals, alignment)")


def run_algorithm(algorithm, intervals: Iterable[Interval], alignment: int) -> Offsets:
    """Run a named or user algorithm and validate its answer (a bad custom plan is an error, not corruption)."""
    intervals = check_intervals(intervals, alignment)
    name, function = resolve_algorithm(algorithm)
    try:
        offsets = function(list(intervals), alignment)
    except MemoryPlanningError:
        raise
    except Exception as exc:  # a user hook's bug must name the hook, not look like an etc crash
        raise MemoryPlanningError(f"memory planning algorithm {name!r} failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(offsets, dict):
        raise MemoryPlanningError(f"memory planning algorithm {name!r} returned {type(offsets).__name__}, "
                                  "expected a dict {value_id: offset}")
    validate_plan(intervals, offsets, alignment)
    return {iv.value_id: offsets[iv.value_id] for iv in intervals}
