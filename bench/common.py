"""What every bench shares: timing (medians, interleaved rounds), ExecuTorch + XNNPACK programs and
methods to compare against, the JSON-line protocol of the child processes a bench measures in,
and the cells of its tables.

The machine is shared and noisy: a bench times its candidates in the same process, called in turn
(`interleaved`), and reports medians and ratios measured in the same run, never absolute figures
from different runs.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time


# ------------------------------------------------------------------------------------------ timing
def median_seconds(fn, *, runs: int, warmup: int = 3, budget_s: float = 3.0) -> float:
    """Median wall seconds of `fn()`: `runs` calls at least, up to five times more while within
    `budget_s`, after `warmup` calls."""
    for _ in range(warmup):
        fn()
    times = []
    deadline = time.perf_counter() + budget_s
    while len(times) < runs or (time.perf_counter() < deadline and len(times) < runs * 5):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
        if len(times) >= runs and time.perf_counter() > deadline:
            break
    return statistics.median(times)


def interleaved(calls: dict, runs: int, budget_s: float, warmup: int = 1) -> tuple[dict, dict]:
    """Call each of `calls` in turn, `runs` rounds at least (more while within `budget_s`):
    ({key: median CPU seconds of this thread}, {key: median wall seconds}).

    With one thread, torch eager, XNNPACK (a one-thread pthreadpool runs on the caller) and
    etc cpu (num_threads=1) all compute on the calling thread, so its CPU time is the work
    done; wall time also counts the time slices other processes of a shared, oversubscribed
    machine took in between (a call of a few ms preempted once doubles)."""
    import torch

    cpu = {key: [] for key in calls}
    wall = {key: [] for key in calls}
    with torch.no_grad():
        for fn in calls.values():
            for _ in range(warmup):
                fn()
        deadline = time.perf_counter() + budget_s
        done = 0
        while done < runs or (done < 5 * runs and time.perf_counter() < deadline):
            for key, fn in calls.items():
                start, start_cpu = time.perf_counter(), time.thread_time()
                fn()
                cpu[key].append(time.thread_time() - start_cpu)
                wall[key].append(time.perf_counter() - start)
            done += 1
            if done >= runs and time.perf_counter() > deadline:
                break
    return ({k: statistics.median(v) for k, v in cpu.items()}, {k: statistics.median(v) for k, v in wall.items()})


# ----------------------------------------------------------------------- the reference: ExecuTorch
def executorch_available() -> bool:
    """Whether the `executorch` reference is installed (`make bench` installs it)."""
    try:
        import executorch.exir  # noqa: F401
        import executorch.runtime  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means "not measured"
        return False
    return True


def executorch_threads(threads: int = 1) -> int | None:
    """Pin ExecuTorch's shared threadpool (XNNPACK's) to `threads`: the comparison is one
    thread each. Returns the count it reports, or None when this build cannot say."""
    try:
        from executorch.extension.pybindings import portable_lib

        portable_lib._unsafe_reset_threadpool(threads)
        return int(portable_lib._threadpool_get_thread_count())
    except Exception:  # noqa: BLE001 - older builds lack the hooks: reported as unknown
        return None


def executorch_program(programs, xnnpack: bool = True):
    """ExecuTorch's ExecutorchProgramManager of exported program(s), lowered to XNNPACK or (not
    `xnnpack`) on its portable kernels."""
    from executorch.exir import to_edge, to_edge_transform_and_lower

    if xnnpack:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        edge = to_edge_transform_and_lower(programs, partitioner=[XnnpackPartitioner()])
    else:
        edge = to_edge(programs)
    return edge.to_executorch()


def executorch_method(program, method: str = "forward"):
    """`method` of an ExecuTorch program loaded into ExecuTorch's runtime. The loaded program reads
    the program's buffer in place: the method keeps both alive (`_etc_keep`)."""
    from executorch.runtime import Runtime

    buffer = program.buffer
    loaded = Runtime.get().load_program(buffer)
    result = loaded.load_method(method)
    result._etc_keep = (program, buffer, loaded)
    return result


# ------------------------------------------------------------------------- children (JSON lines)
def emit(**fields) -> None:
    """One JSON line from a child to its parent: what is known so far (a crash keeps what came before)."""
    print(json.dumps(fields), flush=True)


def error_text(e: BaseException, limit: int = 120) -> str:
    """`Type: first line of the message` (at most `limit` characters of it): a table cell."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:limit] if text else ''}"


def run_child(cmd: list, timeout_s: float, env: dict | None = None) -> tuple[dict, str | None]:
    """Run a benchmark child that prints JSON lines (its last `stage`, "done" at the end):
    (the fields it reported, None or why it ended early: a timeout, a signal, an exit code)."""
    row: dict = {}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
        out, code = proc.stdout, proc.returncode
        tail = [line for line in proc.stderr.strip().splitlines() if line.strip()][-1:]
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        code, tail = None, []
    for line in out.splitlines():
        if line.startswith("{"):
            row.update(json.loads(line))
    if row.get("stage") == "done":
        return row, None
    where = row.get("stage", "building the model")
    if code is None:
        return row, f"timed out after {timeout_s:.0f} s in {where}"
    if code < 0:
        return row, f"crashed (signal {-code}) in {where}"
    return row, f"exit {code} in {where}: {tail[0][:120] if tail else ''}"


def not_tuned_lines(reports) -> list[str]:
    """The delegation reports' decisions off the tuned path ("NOT TUNED <kind> -> <path>: <reason>
    xN"): what the benchmark table cannot show, a layer that fell back, said by the compiler."""
    return [line for r in reports for lines in r.backend_lines.values() for line in lines
            if line.startswith("NOT TUNED")]


# ------------------------------------------------------------------------------------ table cells
def ms(seconds, digits: int = 3) -> str:
    """Seconds as milliseconds with `digits` decimals, `n/a` when not measured."""
    return "n/a" if seconds is None else f"{seconds * 1e3:.{digits}f}"


def ratio(a, b) -> str:
    """`a / b` as `1.23x`, `n/a` when either is missing or `b` is zero."""
    return "n/a" if a is None or b is None or not b else f"{a / b:.2f}x"


def measure_models(models: dict, only, measure, *, label: str, log, note=lambda row: "") -> list:
    """`measure(name)` for each model of `only` (every one of `models` if None), in order, with a
    progress line before and after each on `log` (`note(row)` appended); an unknown name ends the
    run naming the known ones."""
    names = only or list(models)
    unknown = [n for n in names if n not in models]
    if unknown:
        raise SystemExit(f"unknown model(s) {unknown}; known: {', '.join(models)}")
    rows = []
    for name in names:
        print(f"[{label}] {name}", file=log, flush=True)
        start = time.perf_counter()
        rows.append(measure(name))
        print(f"[{label}] {name}: {time.perf_counter() - start:.0f} s{note(rows[-1])}", file=log, flush=True)
    return rows
