"""What profiling costs and how much of the latency it explains (`python -m etc.tools.bench_profiling`).

For zoo models, portable and cpu-delegated, on one thread:

- off: `execute` latency of a program loaded without `enable_etdump`, against execute's body
  without its one check (inputs in, `Method._run`, outputs out): the difference is what
  "profiling off" costs;
- on: latency with `enable_etdump=True` (the price of recording);
- coverage: the recorded instructions' times over the recorded executes' times, and over
  the unrecorded latency: how well the Inspector's rows add up to what a user measures.

Minimums over interleaved runs (a shared machine is noisy: the minimum is the least disturbed
run, and interleaving spreads the noise over the three alike); the record's own ratio is over all runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

MODELS = ["resnet8", "transformer_encoder"]


def _median_ns(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times)


def measure(name: str, backend: str, runs: int) -> dict:
    import etc
    from etc.devtools.inspector import Inspector
    from etc.runtime import Runtime
    from models.zoo import ZOO

    zoo_model = ZOO[name]()
    edge = etc.to_edge(zoo_model.export())
    if backend == "cpu":
        from etc.targets.cpu import CpuPartitioner

        edge = edge.to_backend(CpuPartitioner())
    program = edge.to_executorch(generate_etrecord=True)
    inputs = list(zoo_model.example_inputs)
    # One loaded method for all three: a cpu delegate calibrates its thread count at load, and two loads
    # may choose differently. "off" is the same method with its run record detached.
    recorded_program = Runtime.get().load_program(program.buffer, enable_etdump=True)
    method = recorded_program.load_method("forward")
    record = method._run_record

    def off_execute():
        method._run_record = None
        try:
            return method.execute(inputs)
        finally:
            method._run_record = record

    def direct_execute():  # execute's body without its one "is anything recording?" check
        given = list(inputs)
        as_torch = any(type(x).__module__.startswith("torch") for x in given)
        method._set_inputs(given)
        method._run()
        return [method._output(index, as_torch) for index in method._outputs]

    for _ in range(3):
        off_execute()
        method.execute(inputs)
    recorded_program.run_record.clear()
    off, direct, on = [], [], []
    for _ in range(runs):  # interleaved, so that machine noise hits all three alike
        off.append(_median_ns(off_execute, 1))
        direct.append(_median_ns(direct_execute, 1))
        on.append(_median_ns(lambda: method.execute(inputs), 1))
    inspector = Inspector(recorded_program.run_record, etrecord=program.get_etrecord())
    per_run: dict = {}
    for event in recorded_program.run_record.events:
        if not event.is_execute:
            per_run[event.run] = per_run.get(event.run, 0) + event.duration_ns
    rows_ns = min(per_run.values())
    # Minimum latencies: on a shared machine the minimum is the least disturbed run.
    return {"model": name, "backend": backend, "off_ms": min(off) / 1e6, "direct_ms": min(direct) / 1e6,
            "on_ms": min(on) / 1e6, "coverage_recorded": inspector.coverage("forward"),
            "coverage_unrecorded": rows_ns / min(off), "rows": len(inspector.rows)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--models", nargs="*", default=MODELS)
    parser.add_argument("--backends", nargs="*", default=["portable", "cpu"], choices=["portable", "cpu"])
    args = parser.parse_args(argv)
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "test"))
    from etc.runtime import Runtime

    Runtime.get().set_num_threads(1)
    print(f"{'model':22s} {'backend':8s} {'off ms':>8s} {'_run ms':>8s} {'on ms':>8s} "
          f"{'rows/exec (rec)':>16s} {'rows/latency (off)':>19s}")
    for name in args.models:
        for backend in args.backends:
            r = measure(name, backend, args.runs)
            print(f"{r['model']:22s} {r['backend']:8s} {r['off_ms']:8.3f} {r['direct_ms']:8.3f} {r['on_ms']:8.3f} "
                  f"{100 * r['coverage_recorded']:15.1f}% {100 * r['coverage_unrecorded']:18.1f}%", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
