"""Differential fuzzing of the compiler: random valid models, compiled for every target
configuration, run at several sizes within their bounds, checked against torch eager.

The promise under test (issue 24): etc never computes wrong. Every model `model_gen.models()`
draws (hypothesis) is exported, compiled portable and with CpuPartitioner (one thread, two
threads, profile=True) and run at its example sizes, every Dim at its minimum, at its maximum
and in between, each output compared with eager within the tolerance its ops allow (bit for bit
where every op is exact). `model_check.py` does one model; it runs in a worker child
(`child_worker.py`), so a crash or hang of the compiler or of the code it made is a reported
failure, not a dead run.

A failing model shrinks (hypothesis) to a minimal one, and the fuzzer prints a standalone
reproduction script: the model's source, the check, and the failing configuration; `python
repro.py` shows the failure on any checkout.

    python model_fuzzer.py --models 5000 [--seed 0] [--jobs 2] [--keep-going]   (make fuzz-compiler)

`test_model_fuzz.py` runs a fixed-seed budget of the same in every `make test`.
"""

from __future__ import annotations

import os
import pprint
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from child_worker import ChildWorker, serve  # noqa: E402

CONFIGS = ("portable", "cpu", "cpu-2threads", "cpu-profile", "library")
# configs="rotate": each model portable and one of the others, in turn (more distinct models for
# the same time: make test's budget).
ROTATE = "rotate"


# ------------------------------------------------------------------ the child
def worker() -> None:
    import warnings

    warnings.filterwarnings("ignore")
    import model_check

    def handle(message, reply):
        _, spec, configs, fault = message
        if fault == "wrong-outputs":  # the harness's own test: every program computes wrong
            from etc.runtime.method import Method

            execute = Method.execute
            Method.execute = lambda self, inputs: [o + 1 for o in execute(self, inputs)]
        result = model_check.check(spec, configs, progress=lambda stage: reply(("progress", stage)))
        reply(("done", result))

    serve(handle)


# ------------------------------------------------------------------ the parent
class Pool:
    """One worker child, restarted after a crash or hang."""

    def __init__(self, fault: str | None = None):
        self.worker = None
        self.fault = fault  # "wrong-outputs": the harness's self test (see worker)

    def run(self, spec: dict, configs, timeout: float) -> dict:
        """model_check's result, or a "crash" / "hang" result naming the stage it was in."""
        if self.worker is None:
            self.worker = ChildWorker(__file__, cwd=HERE)
        self.worker.send(("check", spec, tuple(configs), self.fault))
        stage = "start"
        deadline = time.monotonic() + timeout
        while True:
            reply = self.worker.receive(max(deadline - time.monotonic(), 0.0))
            if isinstance(reply, str):  # crash or hang
                how = self.worker.kill()
                self.worker = None
                config = stage.split(" ", 1)[1] if " " in stage else None
                detail = f"the child died ({how})" if reply == "crash" else f"no answer in {timeout:.0f} s"
                return {"status": reply, "stage": stage, "config": config, "detail": f"{detail} during {stage}"}
            if reply[0] == "progress":
                stage = reply[1]
                continue
            return reply[1]

    def close(self):
        if self.worker is not None:
            self.worker.close()
            self.worker = None


@dataclass
class Stats:
    """What a run covered and found."""

    models: int = 0
    seconds: float = 0.0
    statuses: Counter = field(default_factory=Counter)
    dtypes: Counter = field(default_factory=Counter)
    ops: Counter = field(default_factory=Counter)
    dims: Counter = field(default_factory=Counter)
    methods: Counter = field(default_factory=Counter)
    calls: int = 0
    delegated: Counter = field(default_factory=Counter)
    library: Counter = field(default_factory=Counter)  # ran / refused / not applicable
    failures: list = field(default_factory=list)

    def add(self, spec: dict, result: dict, configs) -> None:
        self.models += 1
        self.statuses[result["status"]] += 1
        self.dtypes[spec["dtype"]] += 1
        self.ops.update(spec["ops"])
        self.dims[len(spec["dims"])] += 1
        self.methods[len(spec["methods"])] += 1
        self.calls += len(spec["calls"]) * len(spec["methods"]) * len(configs)
        for line in (result.get("reports") or {}).get("cpu", "").splitlines():
            words = line.split()
            if len(words) >= 2 and words[0] in ("delegated", "portable"):
                self.delegated[words[0]] += int(words[-1][1:]) if words[-1].startswith("x") else 1
        library = (result.get("reports") or {}).get("library")
        if library:
            self.library[library.split(":")[0]] += 1
        if result["status"] != "ok":
            self.failures.append((spec, result))

    def summary(self) -> str:
        lines = [f"{self.models} models in {self.seconds:.0f} s ({self.calls} program runs compared with eager)",
                 "  results:  " + ", ".join(f"{k} {v}" for k, v in sorted(self.statuses.items())),
                 "  dtypes:   " + ", ".join(f"{k} {v}" for k, v in sorted(self.dtypes.items())),
                 "  dims:     " + ", ".join(f"{k} dynamic: {v}" for k, v in sorted(self.dims.items())),
                 "  methods:  " + ", ".join(f"{k}: {v}" for k, v in sorted(self.methods.items())),
                 "  cpu ops:  " + ", ".join(f"{k} {v}" for k, v in sorted(self.delegated.items())),
                 "  library:  " + ", ".join(f"{k} {v}" for k, v in sorted(self.library.items())),
                 "  ops:      " + ", ".join(f"{k} {v}" for k, v in self.ops.most_common())]
        return "\n".join(lines)


def describe(result: dict) -> str:
    where = f" [{result['config']}]" if result.get("config") else ""
    return f"{result['status']}{where} at {result['stage']}: {result['detail'].strip()}"


def reproduction(spec: dict, result: dict) -> str:
    """A standalone script reproducing `result` for `spec`: the model, the check, the config."""
    with open(os.path.join(HERE, "model_check.py")) as f:
        harness = f.read()
    harness = harness[harness.index("import copy"):]  # after its docstring and __future__ import
    config = result.get("config") or "portable"
    data = {k: v for k, v in spec.items() if k not in ("source", "ops")}
    detail = result["detail"].strip().replace('"""', "'''").replace("\\", "/").splitlines()
    if len(detail) > 40:  # a traceback: its head and its end, where the error is
        detail = detail[:3] + ["..."] + detail[-36:]
    return "\n".join([
        f'"""etc compiler fuzzer finding: {result["status"]} [{config}] at {result["stage"]}:',
        *detail,
        "",
        "Run: python repro.py  (needs torch and etc; torchao for an int8 model)",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "# ---- the model",
        spec["source"].rstrip(),
        "",
        "",
        "# ---- the check (test/python/model_check.py)",
        harness.rstrip(),
        "",
        "",
        f"SPEC = {pprint.pformat(data, width=110, sort_dicts=False)}",
        "SPEC['source'] = None  # the Model class above",
        f"CONFIG = {config!r}",
        "",
        'if __name__ == "__main__":',
        "    result = check(SPEC, [CONFIG], model_class=Model)",
        "    print(result['status'], result['stage'], result.get('config'))",
        "    print(result['detail'])",
        "",
    ])


class FuzzFailure(AssertionError):
    pass


def fuzz(n_models: int, *, seed: int = 0, configs=CONFIGS, timeout: float = 300.0, keep_going: bool = False,
         shrink: bool = True, max_ops: int = 6, dtypes=("float32", "bfloat16", "int8"), log=None,
         strategy=None, fault: str | None = None, stats: Stats | None = None,
         failures_dir: str | None = None) -> Stats:
    """Check `n_models` random models (hypothesis, seeded). Stops at the first failure, shrinks
    it and raises FuzzFailure with its reproduction script, unless `keep_going` (then every
    failure is in `Stats.failures`, unshrunk)."""
    from hypothesis import HealthCheck, Phase, given, note, settings
    from hypothesis import seed as hypothesis_seed

    from model_gen import models

    stats = stats if stats is not None else Stats()
    pool = Pool(fault)
    active = {"configs": configs if configs == ROTATE else tuple(configs), "shrinking": False}
    start = time.monotonic()

    phases = [Phase.generate] + ([Phase.shrink] if shrink and not keep_going else [])

    @settings(max_examples=n_models, database=None, deadline=None, phases=phases, derandomize=False,
              suppress_health_check=list(HealthCheck), print_blob=False, report_multiple_bugs=False)
    @hypothesis_seed(seed)
    @given(strategy if strategy is not None else models(max_ops=max_ops, dtypes=tuple(dtypes)))
    def one(spec):
        chosen = active["configs"]
        if chosen == ROTATE:
            chosen = ("portable", CONFIGS[1 + stats.models % (len(CONFIGS) - 1)])
        result = pool.run(spec, chosen, timeout)
        if not active["shrinking"]:
            stats.add(spec, result, chosen)
            if log is not None and (stats.models % 25 == 0 or result["status"] != "ok"):
                log(f"[{stats.models}/{n_models}, {time.monotonic() - start:.0f} s] {describe(result)[:2000]}")
        if result["status"] != "ok":
            active["repro"] = reproduction(spec, result)  # the last one is the shrunk one
            note(active["repro"])
            if failures_dir is not None:
                os.makedirs(failures_dir, exist_ok=True)
                # While shrinking one file, rewritten: hypothesis runs the minimal model last.
                name = f"seed{seed}_shrunk.py" if active["shrinking"] else f"seed{seed}_model{stats.models}.py"
                path = os.path.join(failures_dir, name)
                with open(path, "w") as f:
                    f.write(active["repro"])
            if keep_going:
                return
            # Shrink against the failing configuration only (the others passed, or never ran).
            if result.get("config"):
                active["configs"] = (result["config"],)
            active["shrinking"] = True
            raise FuzzFailure(describe(result))

    try:
        one()
    except FuzzFailure as failure:
        raise FuzzFailure(f"{failure}\n\n{active['repro']}") from None
    finally:
        pool.close()
        stats.seconds = time.monotonic() - start
    return stats


def _shard(args) -> tuple:
    """One process of a parallel run: its own worker child, its own seed."""
    import traceback

    n, seed, configs, keep_going, timeout, failures_dir = args
    stats = Stats()
    try:
        fuzz(n, seed=seed, configs=configs, keep_going=keep_going, timeout=timeout, stats=stats,
             failures_dir=failures_dir, log=lambda line: print(f"[seed {seed}] {line}", flush=True))
        return stats, None
    except FuzzFailure as failure:
        return stats, f"seed {seed}: {failure}"
    except Exception:  # noqa: BLE001  (the generator's own bug: reported, the other shards go on)
        return stats, f"seed {seed}: the fuzzer itself failed:\n{traceback.format_exc()}"


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--models", type=int, default=5000, help="random models to check (default 5000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2, help="parallel shards, each with its own worker")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated subset of {CONFIGS}, or "
                                                                       f"'{ROTATE}' (portable and one cpu one in turn)")
    parser.add_argument("--keep-going", action="store_true", help="record every failure unshrunk instead of "
                                                                   "stopping at the first and shrinking it")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per model (compile and all runs)")
    parser.add_argument("--failures-dir", default=None, help="write each failure's reproduction script here "
                                                              "(as it is found)")
    args = parser.parse_args(argv)
    if args.worker:
        worker()
        return 0
    configs = ROTATE if args.configs == ROTATE else tuple(c for c in args.configs.split(",") if c)
    per_shard = [args.models // args.jobs + (1 if k < args.models % args.jobs else 0) for k in range(args.jobs)]
    work = [(n, args.seed * 1000 + k, configs, args.keep_going, args.timeout, args.failures_dir)
            for k, n in enumerate(per_shard)]
    start = time.monotonic()
    if args.jobs == 1:
        outcomes = [_shard(work[0])]
    else:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(args.jobs) as executor:
            outcomes = list(executor.map(_shard, work))
    total = Stats()
    errors = []
    for stats, error in outcomes:
        if error:
            errors.append(error)
        total.models += stats.models
        total.calls += stats.calls
        for name in ("statuses", "dtypes", "ops", "dims", "methods", "delegated", "library"):
            getattr(total, name).update(getattr(stats, name))
        total.failures += stats.failures
    total.seconds = time.monotonic() - start
    print(total.summary())
    for spec, result in total.failures:
        print(f"FAIL {describe(result)[:3000]}")
    if total.failures and args.failures_dir:
        print(f"reproduction scripts: {args.failures_dir}")
    for error in errors:
        print(f"FAIL (shrunk) {error}")
    return 1 if errors or total.failures else 0


if __name__ == "__main__":
    sys.exit(main())
