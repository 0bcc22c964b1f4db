"""One runtime: etc's cpu backend against XNNPACK, both inside ExecuTorch's runtime.

    python -m etc.bench.executorch_backend [--models a,b] [--llms a,b] [--runs N] [--decode-tokens N]

The other sections compare etc's runtime (Python, numpy around the native code) with ExecuTorch's
(C++ around XNNPACK): two runtimes. Here both programs run in ExecuTorch's runtime (`executorch.runtime`,
the same process, the same per-call overhead): etc's program (`CpuPartitioner(num_threads=1)`) through
etc's cpu backend for ExecuTorch (`runtime/executorch_backend/`, loaded with
`etc.runtime.executorch_backend.load()`), ExecuTorch's own (`to_edge_transform_and_lower` with
XnnpackPartitioner) through XNNPACK, ExecuTorch's threadpool at one thread: the fairest comparison of
the two compilers' code there is.

Models: the real models of `bench/hf_models.py` (latency, interleaved, CPU time of the calling
thread, which both backends compute on with one thread) and the LLMs of `bench/llm.py` (prefill
and decode tokens/s of the same export). Each model runs in a child process, as there.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
import time

from etc.bench.common import ms, ratio, run_child

ms2 = functools.partial(ms, digits=2)  # this table's milliseconds

BACKENDS = ["etc_executorch", "xnnpack"]
LLMS = ["llama_15m", "llama_15m_8da4w"]


def _model_row(name: str, runs: int, timeout_s: float) -> dict:
    """The model's row; a backend that crashes its child is reported and the other measured alone."""
    backends = list(BACKENDS)
    row: dict = {"name": name}
    while backends:
        cmd = [sys.executable, "-m", "etc.bench.hf_models", "--child", name, "--runs", str(runs),
               "--backends", ",".join(backends)]
        got, failure = run_child(cmd, timeout_s)
        for key, value in got.items():
            row.setdefault(key, value)
            if key in BACKENDS:
                row[key] = value
        if failure is None:
            return row
        stage = got.get("stage", "")
        culprit = next((b for b in backends if stage.startswith(b.split("_")[0])), None)
        if culprit is None:
            row["error"] = failure
            return row
        row[f"{culprit}_error"] = failure
        backends.remove(culprit)
    return row


def _llm_row(name: str, runs: int, decode_tokens: int, timeout_s: float) -> dict:
    from etc.bench import llm as bench_llm

    row, failure = bench_llm.measure_in_child(name, runs, decode_tokens, BACKENDS, timeout_s)
    row["name"] = name
    if failure is not None:
        row["error"] = failure
    return row


def _diff(row, key) -> str:
    value = row.get(f"{key}_maxdiff")
    return "n/a" if value is None else f"{value:.2g}"


def render(model_rows: list[dict], llm_rows: list[dict], decode_tokens: int) -> str:
    lines = ["Both programs in ExecuTorch's runtime (`executorch.runtime`), one thread: etc's through its cpu backend "
             "for ExecuTorch, ExecuTorch's through XNNPACK. Latency in ms, medians of interleaved calls (CPU time of "
             "the calling thread); ratios etc / XNNPACK (below 1.00x etc is faster).", "",
             "| model | etc backend ms | XNNPACK ms | etc/XNNPACK | etc max abs diff | XNNPACK max abs diff |",
             "|---|---|---|---|---|---|"]
    ratios = []
    for r in model_rows:
        etc_, xnn = r.get("etc_executorch"), r.get("xnnpack")
        if etc_ and xnn:
            ratios.append(etc_ / xnn)
        lines.append(f"| {r['name']} | {ms2(etc_)} | {ms2(xnn)} | {ratio(etc_, xnn)} | "
                     f"{_diff(r, 'etc_executorch')} (of {r.get('ref_max', 0):.2g}) | {_diff(r, 'xnnpack')} |")
    if ratios:
        geomean = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        lines += ["", f"**Geomean etc / XNNPACK inside ExecuTorch over the {len(ratios)} model(s) both ran: "
                  f"{geomean:.2f}x**."]
    if llm_rows:
        lines += ["", f"LLMs (tokens/s, higher is better; ratios etc over XNNPACK, above 1.00x etc is faster): a prefill "
                  f"of 32 and of 128 tokens from position 0, then {decode_tokens} decode calls of one token.", "",
                  "| model | phase | etc backend tok/s | XNNPACK tok/s | etc/XNNPACK |", "|---|---|---|---|---|"]
        for r in llm_rows:
            for label, kind in (("prefill 32", "prefill32"), ("prefill 128", "prefill128"), ("decode", "decode")):
                etc_, xnn = r.get(f"etc_executorch_{kind}_tps"), r.get(f"xnnpack_{kind}_tps")
                lines.append(f"| {r['name']} | {label} | {'n/a' if etc_ is None else f'{etc_:.1f}'} | "
                             f"{'n/a' if xnn is None else f'{xnn:.1f}'} | {ratio(etc_, xnn)} |")
    problems = [(r["name"], k[:-6] or "run", v) for r in model_rows + llm_rows for k, v in r.items()
                if k.endswith("error")]
    if problems:
        lines += ["", "Failures:", ""] + [f"- {name} ({who}): {msg}" for name, who, msg in problems]
    return "\n".join(lines) + "\n"


def run(models: list[str] | None = None, llms: list[str] | None = None, runs: int = 10, decode_tokens: int = 64,
        timeout_s: float = 1800.0, log=sys.stderr) -> str:
    from etc.runtime import executorch_backend
    from etc.bench import hf_models as bench_models, llm as bench_llm

    executorch_backend.build()  # once, here: the children load it
    models = list(bench_models.MODELS) if models is None else models
    llms = LLMS if llms is None else llms
    unknown = [m for m in models if m not in bench_models.MODELS] + [m for m in llms if m not in bench_llm.MODELS]
    if unknown:
        raise SystemExit(f"unknown model(s) {unknown}")
    model_rows, llm_rows = [], []
    for name in models:
        start = time.perf_counter()
        model_rows.append(_model_row(name, runs, timeout_s))
        print(f"[bench_executorch] {name}: {time.perf_counter() - start:.0f} s", file=log, flush=True)
    for name in llms:
        start = time.perf_counter()
        llm_rows.append(_llm_row(name, max(3, runs // 2), decode_tokens, timeout_s))
        print(f"[bench_executorch] {name}: {time.perf_counter() - start:.0f} s", file=log, flush=True)
    return render(model_rows, llm_rows, decode_tokens)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="real models (bench/hf_models.py), comma-separated; '' for none")
    parser.add_argument("--llms", help="LLMs (bench/llm.py), comma-separated; '' for none")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--decode-tokens", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per model and child")
    args = parser.parse_args(argv)

    def names(text):
        return None if text is None else [n for n in text.split(",") if n]

    print(run(names(args.models), names(args.llms), args.runs, args.decode_tokens, args.timeout))
    return 0


if __name__ == "__main__":
    sys.exit(main())
