"""The two-thread bench section (bench/threads.py): its table, verdicts and geomeans, and its blocks."""

from etc.bench.threads import _blocks, render


def _rows():
    return [{"name": "scales", "etc_1t": 10e-3, "etc_2t": 5e-3, "torch_1t": 20e-3, "torch_2t": 12.5e-3,
             "etc_1t_maxdiff": 1e-6, "etc_2t_maxdiff": 2e-6},
            {"name": "stuck", "etc_1t": 4e-3, "etc_2t": 4e-3, "torch_1t": 8e-3, "torch_2t": 5e-3,
             "etc_2t_kept_one": "threads: 1 of 2 (measured at load: 3900 us on one, 4100 us on 2)"},
            {"name": "broken", "error": "timed out after 9 s in etc compile"}]


def test_table_gives_each_runtimes_speedup_and_the_verdict():
    lines = render(_rows()).splitlines()
    assert lines[2] == "| scales | 10.00 | 5.00 | 2.00x | 20.00 | 12.50 | 1.60x | 0.40x | yes |"
    assert lines[3] == "| stuck | 4.00 | 4.00 | 1.00x | 8.00 | 5.00 | 1.60x | 0.80x | **no** |"
    assert lines[4] == "| broken | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a |"


def test_geomean_counts_the_models_both_ran_and_failures_are_listed():
    text = render(_rows())
    assert "**Geomean speedup of a second thread over 2 model(s): etc 1.41x, torch 1.60x**" in text
    assert "etc gains at least torch's on 1 of 2." in text
    assert "Largest |etc - eager| over the models and both thread counts: 2e-06." in text
    assert "- broken: timed out after 9 s in etc compile" in text


def test_blocks_run_each_runtime_in_its_own_block_after_its_setup():
    order = []
    calls = {key: (lambda k=key: order.append(f"setup {k}"), lambda k=key: order.append(k)) for key in ("a", "b")}
    medians = _blocks(calls, rounds=2, per_block=3)
    assert set(medians) == {"a", "b"} and all(t >= 0 for t in medians.values())
    block = ["setup a", "a", "a", "a", "a", "setup b", "b", "b", "b", "b"]  # first call of a block: not timed
    assert order == block * 2


def test_delegates_that_kept_one_thread_are_listed():
    text = render(_rows())
    assert ("Delegates of the two-thread program that kept one thread (each times both at load and keeps the "
            "faster):\n\n- stuck: threads: 1 of 2 (measured at load: 3900 us on one, 4100 us on 2)") in text
    assert "- scales:" not in text


def test_int8_table_compares_with_xnnpack_and_says_whether_two_threads_kept_the_bytes():
    from etc.bench.threads import render_int8

    rows = [{"name": "resnet", "etc_1t": 4e-3, "etc_2t": 2e-3, "xnnpack_1t": 5e-3, "xnnpack_2t": 2.75e-3,
             "etc_same_bytes": True},
            {"name": "racy", "etc_1t": 4e-3, "etc_2t": 2.5e-3, "xnnpack_1t": 5e-3, "xnnpack_2t": 2.5e-3,
             "etc_same_bytes": False},
            {"name": "broken", "error": "exit 1 in timing: KeyError"}]
    lines = render_int8(rows).splitlines()
    assert lines[2] == "| resnet | 4.00 | 2.00 | 2.00x | 5.00 | 2.75 | 1.82x | 0.73x | yes | yes |"
    assert lines[3] == "| racy | 4.00 | 2.50 | 1.60x | 5.00 | 2.50 | 2.00x | 1.00x | **no** | **no** |"
    assert lines[4] == "| broken | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a |"
    assert "- broken: exit 1 in timing: KeyError" in lines
