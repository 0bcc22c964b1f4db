"""Properties of the memory planning algorithms on random and hand-made interval sets."""

import random

import pytest

from etc.errors import MemoryPlanningError
from etc.passes.memory_planning_algorithms import (
    Interval,
    greedy,
    greedy_candidates,
    lower_bounds,
    naive,
    pool_sizes,
    run_algorithm,
    validate_plan,
)

ALIGN = 16


def random_intervals(rng: random.Random, count: int, pools=(1,), max_size=40) -> list[Interval]:
    intervals = []
    for value_id in range(count):
        start = rng.randint(0, 3 * count)
        intervals.append(Interval(value_id, start, start + rng.randint(0, 12), rng.randint(0, max_size) * ALIGN,
                                  rng.choice(pools)))
    return intervals


def chain(sizes: list[int]) -> list[Interval]:
    """Value i is made by step i and read by step i + 1: at most two live at once."""
    return [Interval(i, i, i + 1, size) for i, size in enumerate(sizes)]


def brute_force_collisions(intervals, offsets):
    """The O(n^2) definition of a valid plan, independent of validate_plan's sweep."""
    bad = []
    for a in intervals:
        for b in intervals:
            if a.value_id < b.value_id and a.mem_id == b.mem_id and a.overlaps_in_time(b) and a.size and b.size:
                if offsets[a.value_id] < offsets[b.value_id] + b.size and offsets[b.value_id] < offsets[a.value_id] + a.size:
                    bad.append((a.value_id, b.value_id))
    return bad


@pytest.mark.parametrize("seed", range(40))
def test_random_plans_are_valid_and_between_bound_and_naive(seed):
    rng = random.Random(seed)
    intervals = random_intervals(rng, rng.randint(1, 60), pools=(1, 2, 3))
    greedy_plan = run_algorithm("greedy", intervals, ALIGN)
    naive_plan = run_algorithm("naive", intervals, ALIGN)
    assert brute_force_collisions(intervals, greedy_plan) == []
    assert brute_force_collisions(intervals, naive_plan) == []
    bounds = lower_bounds(intervals)
    greedy_sizes, naive_sizes = pool_sizes(intervals, greedy_plan), pool_sizes(intervals, naive_plan)
    for mem_id, bound in bounds.items():
        assert bound <= greedy_sizes[mem_id] <= naive_sizes[mem_id]
        assert naive_sizes[mem_id] == sum(iv.size for iv in intervals if iv.mem_id == mem_id)
    assert all(offset % ALIGN == 0 for offset in greedy_plan.values())


@pytest.mark.parametrize("seed", range(40))
def test_every_greedy_strategy_is_valid(seed):
    rng = random.Random(1000 + seed)
    pool = random_intervals(rng, rng.randint(1, 40))
    for name, plan in greedy_candidates(pool, ALIGN).items():
        assert brute_force_collisions(pool, plan) == [], name


@pytest.mark.parametrize("seed", range(60))
def test_greedy_reaches_the_lower_bound_on_chains(seed):
    rng = random.Random(seed)
    sizes = [rng.randint(0, 100) * ALIGN for _ in range(rng.randint(1, 50))]
    intervals = chain(sizes)
    plan = greedy(intervals, ALIGN)
    assert brute_force_collisions(intervals, plan) == []
    assert pool_sizes(intervals, plan)[1] == lower_bounds(intervals)[1] == max(
        sizes[i] + (sizes[i + 1] if i + 1 < len(sizes) else 0) for i in range(len(sizes)))


def test_chain_that_defeats_plain_largest_first_best_fit():
    # Largest-first best-fit alone stacks the 256-byte value on top (608 + 256 = 864 bytes);
    # the bound is 288 + 320 = 608, which the two-sided plan reaches.
    intervals = chain([304, 256, 288, 320])
    largest_first = greedy_candidates(intervals, ALIGN)["best-fit/size"]
    assert pool_sizes(intervals, largest_first)[1] == 864
    assert pool_sizes(intervals, greedy(intervals, ALIGN))[1] == lower_bounds(intervals)[1] == 608


def test_greedy_reuses_memory_naive_does_not():
    intervals = [Interval("a", 0, 1, 64), Interval("b", 1, 2, 64), Interval("c", 2, 3, 64)]
    assert pool_sizes(intervals, greedy(intervals, ALIGN)) == {1: 128}
    assert pool_sizes(intervals, naive(intervals, ALIGN)) == {1: 192}


def test_sizes_are_rounded_to_the_alignment():
    intervals = [Interval("a", 0, 5, 10), Interval("b", 0, 5, 3)]
    plan = run_algorithm("greedy", intervals, 64)
    assert sorted(plan.values()) == [0, 64]


def test_pools_are_planned_independently():
    intervals = [Interval("a", 0, 4, 160, mem_id=1), Interval("b", 0, 4, 32, mem_id=2),
                 Interval("c", 0, 4, 32, mem_id=2)]
    plan = run_algorithm("greedy", intervals, ALIGN)
    assert plan["a"] == 0 and sorted([plan["b"], plan["c"]]) == [0, 32]
    assert pool_sizes(intervals, plan) == {1: 160, 2: 64}
    assert lower_bounds(intervals) == {1: 160, 2: 64}


def test_user_algorithm_is_used():
    calls = []

    def everything_after_everything(intervals, alignment):
        calls.append((len(intervals), alignment))
        offsets, top = {}, {}
        for iv in intervals:
            offsets[iv.value_id] = top.get(iv.mem_id, 0) + 1024
            top[iv.mem_id] = offsets[iv.value_id] + iv.size
        return offsets

    intervals = [Interval("a", 0, 1, 32), Interval("b", 1, 2, 32)]
    plan = run_algorithm(everything_after_everything, intervals, ALIGN)
    assert calls == [(2, ALIGN)]
    assert plan == {"a": 1024, "b": 2080}


@pytest.mark.parametrize("bad_plan, message", [
    (lambda ivs, a: {iv.value_id: 0 for iv in ivs}, "overlaps values"),
    (lambda ivs, a: {"a": 0}, "gives no offset for value 'b'"),
    (lambda ivs, a: {"a": 0, "b": 40}, "not a multiple of the alignment"),
    (lambda ivs, a: {"a": 0, "b": -32}, "invalid offset"),
    (lambda ivs, a: [0, 32], "expected a dict"),
    (lambda ivs, a: 1 / 0, "ZeroDivisionError"),
])
def test_user_algorithm_is_validated(bad_plan, message):
    intervals = [Interval("a", 0, 2, 32), Interval("b", 1, 3, 32)]
    with pytest.raises(MemoryPlanningError, match=message):
        run_algorithm(bad_plan, intervals, ALIGN)


def test_overlap_only_counts_within_one_pool_and_lifetime():
    intervals = [Interval("a", 0, 2, 32, mem_id=1), Interval("b", 0, 2, 32, mem_id=2), Interval("c", 3, 4, 32)]
    validate_plan(intervals, {"a": 0, "b": 0, "c": 0}, ALIGN)  # different pool, or not live together


@pytest.mark.parametrize("intervals, message", [
    ([Interval("a", 3, 2, 16)], "ends"),
    ([Interval("a", 0, 2, 16, mem_id=0)], "mem_id"),
    ([Interval("a", 0, 2, 16), Interval("a", 3, 4, 16)], "more than one interval"),
    ([Interval("a", 0, 2, -16)], "negative size"),
])
def test_malformed_intervals_are_rejected(intervals, message):
    with pytest.raises(MemoryPlanningError, match=message):
        run_algorithm("greedy", intervals, ALIGN)


def test_unknown_algorithm_and_alignment_are_rejected():
    with pytest.raises(MemoryPlanningError, match="unknown memory planning algorithm 'bestest'"):
        run_algorithm("bestest", [], ALIGN)
    with pytest.raises(MemoryPlanningError, match="alignment"):
        run_algorithm("greedy", [], 0)


def test_lower_bound_counts_values_live_at_the_same_step():
    # a ends at step 2 and c starts at step 2: both are live there.
    intervals = [Interval("a", 0, 2, 32), Interval("b", 0, 0, 64), Interval("c", 2, 3, 48)]
    assert lower_bounds(intervals) == {1: 96}


def test_executorch_bucket_candidate_follows_its_rules():
    # a fills bucket 0 (64 bytes); b reuses it at offset 0 after a dies; c meets b only, and fits
    # above b inside bucket 0 (ExecuTorch's overlapping allocations) instead of opening a new bucket.
    intervals = [Interval("a", 0, 0, 64), Interval("b", 1, 3, 32), Interval("c", 2, 2, 16)]
    plans = greedy_candidates(intervals, ALIGN)
    assert plans["executorch-buckets"] == {"a": 0, "b": 0, "c": 32}
    assert plans["executorch-buckets/no-overlap"] == {"a": 0, "b": 0, "c": 64}
    assert pool_sizes(intervals, greedy(intervals, ALIGN)) == {1: 64}
