"""What profiling costs and how much of the latency it explains (`python -m etc.bench.profiling`).

For zoo models, portable and cpu-delegated, on one thread:

- off: `execute` latency of a program loaded without `enable_etdump`, against execute's body
  without its one check (inputs in, `Method._run`, outputs out): the difference is what
  "profiling off" costs;
- on: latency with `enable_etdump=True` (the price of recording);
- coverage: the recorded instructions' times over the recorded executes' times, and over
  the unrecorded latency: how well the Inspector's rows add up to what a user measures.

Then the cpu delegate's regions (`CpuPartitioner(profile=True)`: cycle counters between its
dispatch regions, `etc-cpu-profile-regions`), for the zoo's ResNet-8 and transformer encoder and
at realistic sizes (ResNet-18 at 224, the encoder 256 wide over 128 tokens):

- off: latency of `CpuPartitioner(profile=False)`'s program, which is byte for byte
  `CpuPartitioner()`'s (checked here): profiling off costs nothing, by construction;
- counters: the profiled program, not recording (the counter reads compiled in, nobody reading);
- on: the profiled program recording (`enable_etdump=True`, the regions reported);
- regions/call: the regions' times over the delegate call that contains them (median run): how
  much of the native call the table breaks down (the rest is the Python around the call);
- rows/latency: the Inspector's rows with the delegate replaced by its regions, over the
  unrecorded latency (`off`): how well the table adds up to what a user measures.

Minimums over interleaved runs (a shared machine is noisy: the minimum is the least disturbed
run, and interleaving spreads the noise over the three alike); the record's own ratio is over all runs.

    python -m etc.bench.profiling [--runs N] [--models ...] [--backends portable cpu]
                                        [--profiled-models ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

MODELS = ["resnet8", "transformer_encoder"]
LOADS = 3
PROFILED_MODELS = ["resnet8", "transformer_encoder", "resnet18", "transformer_encoder_256"]


def _model(name: str):
    """A zoo model (bench-only ones included), or the zoo's encoder at a realistic size."""
    from etc.models.zoo import BENCH_ONLY, ZOO

    if name in ZOO:
        return ZOO[name]()
    if name in BENCH_ONLY:
        return BENCH_ONLY[name]()
    if name == "transformer_encoder_256":
        import torch
        from etc.models.zoo import TransformerEncoder, ZooModel

        torch.manual_seed(0)
        return ZooModel(name, TransformerEncoder(dim=256, heads=4, layers=4).eval(),
                        (torch.randn(1, 128, 256), torch.zeros(1, 128, dtype=torch.bool)))
    raise SystemExit(f"unknown model {name}")


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
    from etc.models.zoo import ZOO

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


def measure_profiled(name: str, runs: int) -> dict:
    """The cpu delegate's regions: what they cover and what they cost (see the module docstring)."""
    import etc
    from etc.runtime import Runtime
    from etc.targets.cpu import CpuPartitioner

    zoo_model = _model(name)
    exported = zoo_model.export()
    default = etc.to_edge(exported).to_backend(CpuPartitioner()).to_executorch()
    off_program = etc.to_edge(exported).to_backend(CpuPartitioner(profile=False)).to_executorch()
    profiled = etc.to_edge(exported).to_backend(CpuPartitioner(profile=True)).to_executorch(generate_etrecord=True)
    inputs = list(zoo_model.example_inputs)
    # Each program loaded LOADS times: the same program loaded twice can differ by 20% (where its arenas
    # and code land), more than what is measured here; the minimum over loads compares best with best.
    methods, records = [], []
    for _ in range(LOADS):
        methods.append(("off", Runtime.get().load_program(off_program.buffer).load_method("forward")))
        methods.append(("counters", Runtime.get().load_program(profiled.buffer).load_method("forward")))
        recorded = Runtime.get().load_program(profiled.buffer, enable_etdump=True)
        methods.append(("on", recorded.load_method("forward")))
        records.append(recorded.run_record)
    for _, method in methods:
        for _ in range(3):
            method.execute(inputs)
    for record in records:
        record.clear()
    times: dict = {"off": [], "counters": [], "on": []}
    for _ in range(runs):  # interleaved, so that machine noise hits all alike
        for key, method in methods:
            times[key].append(_median_ns(lambda: method.execute(inputs), 1))
    explained = []  # per run: the table's rows, each delegate call replaced by its regions
    shares = []
    region_names = set()
    for record in records:
        regions: dict = {}
        for event in record.delegate_events:
            regions[event.run] = regions.get(event.run, 0) + event.duration_ns
            region_names.add((event.name, event.ops))
        rows: dict = dict(regions)
        for event in record.events:
            if event.is_execute:
                continue
            if event.name.startswith("delegate ") and event.run in regions:
                shares.append(regions[event.run] / event.duration_ns)
                continue
            rows[event.run] = rows.get(event.run, 0) + event.duration_ns
        explained += rows.values()
    return {"model": name, "identical": default.buffer == off_program.buffer,
            "regions": len(region_names),
            "off_ms": min(times["off"]) / 1e6, "counters_ms": min(times["counters"]) / 1e6,
            "on_ms": min(times["on"]) / 1e6, "regions_per_call": statistics.median(shares),
            "rows_per_latency": min(explained) / min(times["off"])}


def render_profiled(rows: list) -> str:
    lines = ["| model | regions | off ms (= unprofiled) | counters ms | recording ms | regions / delegate call "
             "| rows / latency |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        same = "" if r["identical"] else " (NOT the unprofiled bytes)"
        lines.append(f"| {r['model']} | {r['regions']} | {r['off_ms']:.3f}{same} | {r['counters_ms']:.3f} "
                     f"({100 * (r['counters_ms'] / r['off_ms'] - 1):+.1f}%) | {r['on_ms']:.3f} "
                     f"({100 * (r['on_ms'] / r['off_ms'] - 1):+.1f}%) | {100 * r['regions_per_call']:.1f}% "
                     f"| {100 * r['rows_per_latency']:.1f}% |")
    return "\n".join(lines) + "\n"


def render_recording(rows: list) -> str:
    lines = ["| model | backend | off ms | execute body ms | recording ms | rows / execute (recorded) "
             "| rows / latency (off) |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['backend']} | {r['off_ms']:.3f} | {r['direct_ms']:.3f} | {r['on_ms']:.3f} "
                     f"| {100 * r['coverage_recorded']:.1f}% | {100 * r['coverage_unrecorded']:.1f}% |")
    return "\n".join(lines) + "\n"


def run(models: list | None = None, profiled_models: list | None = None, runs: int = 30) -> str:
    """Both tables as markdown (for `make bench`)."""
    from etc.runtime import Runtime

    Runtime.get().set_num_threads(1)
    recording = [measure(name, backend, runs) for name in (models or MODELS) for backend in ("portable", "cpu")]
    profiled = [measure_profiled(name, runs) for name in (profiled_models or PROFILED_MODELS)]
    return ("What recording costs (`enable_etdump=True`) and how well the Inspector's rows add up, one thread "
            "(`python -m etc.bench.profiling`): latency not recording, execute's body without its one "
            "check, recording; the rows over the recorded executes and over the unrecorded latency.\n\n"
            + render_recording(recording) +
            "\nThe cpu delegate's regions (`CpuPartitioner(profile=True)`): latency with profiling off (the "
            "program is byte for byte the unprofiled one), with the counters compiled in but not recording, and "
            "recording; the regions' share of the delegate call, and the table's rows (the delegate broken into "
            "its regions) over the unrecorded latency.\n\n" + render_profiled(profiled))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--models", nargs="*", default=MODELS)
    parser.add_argument("--backends", nargs="*", default=["portable", "cpu"], choices=["portable", "cpu"])
    parser.add_argument("--profiled-models", nargs="*", default=PROFILED_MODELS,
                        help="models for the cpu delegate's regions (none: skip that table)")
    args = parser.parse_args(argv)
    from etc.runtime import Runtime

    Runtime.get().set_num_threads(1)
    print(f"{'model':22s} {'backend':8s} {'off ms':>8s} {'_run ms':>8s} {'on ms':>8s} "
          f"{'rows/exec (rec)':>16s} {'rows/latency (off)':>19s}")
    for name in args.models:
        for backend in args.backends:
            r = measure(name, backend, args.runs)
            print(f"{r['model']:22s} {r['backend']:8s} {r['off_ms']:8.3f} {r['direct_ms']:8.3f} {r['on_ms']:8.3f} "
                  f"{100 * r['coverage_recorded']:15.1f}% {100 * r['coverage_unrecorded']:18.1f}%", flush=True)
    if args.profiled_models:
        print()
        print(render_profiled([measure_profiled(name, args.runs) for name in args.profiled_models]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
