"""bench/llm.py without its bench-only dependencies: a tiny Llama measured in-process on etc
(dynamic and static exports) and torch, each backend's logits checked against eager; the table
renders what the child reports. `make bench` measures the real sizes."""

import json
import subprocess
import sys

import pytest

from etc.bench import llm as bench_llm


def test_imports_without_bench_only_dependencies():
    code = ("import sys, etc.bench.llm; "
            "print(sorted(m for m in ('executorch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def _tiny_llama():
    import torch

    from etc.llm.llama import Llama, LlamaConfig

    torch.manual_seed(0)
    return Llama(LlamaConfig(vocab_size=64, dim=32, n_layers=1, n_heads=2, n_kv_heads=2, hidden_dim=64,
                             max_context_len=bench_llm.MAX_CONTEXT_LEN)).eval()


def test_measure_reports_every_phase_and_matches_eager(monkeypatch, capsys):
    monkeypatch.setitem(bench_llm.MODELS, "tiny", bench_llm.Model("tiny", "a tiny Llama", _tiny_llama))
    bench_llm.measure("tiny", runs=1, decode_tokens=2, backends={"etc", "torch", "etc_static"}, budget_s=0.0)
    row = {}
    for line in capsys.readouterr().out.splitlines():
        if line.startswith("{"):
            row.update(json.loads(line))
    assert row["stage"] == "done", row
    assert not [k for k in row if k.endswith("_error")], row
    for key in ("etc", "torch"):
        for kind in ("prefill32", "prefill128", "decode"):
            assert row[f"{key}_{kind}_tps"] > 0
    assert row["etc_static_decode_tps"] > 0 and "etc_static_prefill32_tps" not in row
    assert row["etc_maxdiff"] < 1e-4 * max(1.0, row["ref_max"])
    assert row["etc_static_maxdiff"] < 1e-4 * max(1.0, row["ref_max"])
    assert row["etc_static_portable_ops"] == 0  # a static length: the whole decoder in one cpu delegate
    assert isinstance(row["etc_not_tuned"], list) and isinstance(row["etc_static_not_tuned"], list)
    table = bench_llm.render([{**row, "name": "tiny"}], decode_tokens=2)
    assert "| tiny | decode | " in table and "| tiny | decode, static 1-token export | " in table
    assert "decisions off the tuned path: " in table
    text = bench_llm.render([{**row, "name": "tiny", "etc_not_tuned": ["NOT TUNED  reduction -> loops: why x2"]}], 2)
    assert "decisions off the tuned path: reduction -> loops: why x2" in text


def test_measure_isolated_names_the_backend_that_crashed(monkeypatch):
    calls = []

    def fake_child(name, runs, decode_tokens, backends, timeout_s):
        calls.append(list(backends))
        if "xnnpack" in backends:
            return {"name": name, "stage": "xnnpack compile", "torch_decode_tps": 1.0}, "crashed (signal 11)"
        return {"name": name, "stage": "done", "torch_decode_tps": 2.0}, None

    monkeypatch.setattr(bench_llm, "measure_in_child", fake_child)
    row = bench_llm.measure_isolated("m", 1, 1, 1.0)
    assert calls == [list(bench_llm.BACKENDS), [b for b in bench_llm.BACKENDS if b != "xnnpack"]]
    assert row["xnnpack_error"] == "crashed (signal 11)" and row["torch_decode_tps"] == 2.0


def test_decode_tokens_must_fit_the_cache():
    with pytest.raises(SystemExit):
        bench_llm.main(["--decode-tokens", str(bench_llm.MAX_CONTEXT_LEN)])


def test_make_bench_has_an_llm_section(monkeypatch, tmp_path, capsys):
    from etc.bench import report as bench

    calls = []

    def fake_run(only=None, runs=5, decode_tokens=64, timeout_s=1800.0, log=None):
        calls.append(runs)
        return "| llama_15m | decode | ... |\n"

    monkeypatch.setattr(bench_llm, "run", fake_run)
    output = tmp_path / "BENCHMARKS.md"
    assert bench.main(["--sections", "llm", "--runs", "20", "--output", str(output)]) == 0
    text = output.read_text()
    assert "## LLM" in text and "| llama_15m | decode | ... |" in text and "## Zoo" not in text
    assert calls == [5]


def test_a_benchmark_child_ends_as_a_row_or_a_reason():
    """common.run_child (every bench's children): the JSON fields a child
    printed, and why it ended early when it did: its exit code, a timeout, in its last stage."""
    from etc.bench.common import run_child

    done = 'print(\'{"stage": "done", "x": 1}\')'
    assert run_child([sys.executable, "-c", done], 30) == ({"stage": "done", "x": 1}, None)
    failed = 'import json; print(json.dumps({"stage": "export"})); raise SystemExit(3)'
    assert run_child([sys.executable, "-c", failed], 30) == ({"stage": "export"}, "exit 3 in export: ")
    row, why = run_child([sys.executable, "-c", "import time; time.sleep(10)"], 0.5)
    assert row == {} and why == "timed out after 0 s in building the model"


def test_the_8da4w_model_runs_its_own_backends_and_sizes_are_rendered(monkeypatch):
    calls = []

    def fake_child(name, runs, decode_tokens, backends, timeout_s):
        calls.append(list(backends))
        return {"name": name, "stage": "done", "etc_decode_tps": 4.0, "xnnpack_decode_tps": 2.0,
                "etc_pte_bytes": 3 * 2 ** 20, "xnnpack_pte_bytes": 4 * 2 ** 20}, None

    monkeypatch.setattr(bench_llm, "measure_in_child", fake_child)
    row = bench_llm.measure_isolated("llama_15m_8da4w", 1, 1, 1.0)
    assert calls == [["etc", "xnnpack", "torch"]]
    text = bench_llm.render([row], 1)
    assert "| llama_15m_8da4w | decode | 4.0 | 2.0 | n/a | 2.00x | n/a |" in text
    assert "| llama_15m_8da4w | 3.00 MiB | 4.00 MiB | 0.75x |" in text
    assert "static 1-token" not in text.split("How each program ran")[0]


def test_the_bf16_scaled_8da4w_model_has_bf16_group_scales():
    """The like-for-like size row: torchao keeps the scales it was asked for (XNNPACK stores bf16)."""
    pytest.importorskip("torchao")
    import torch

    module = bench_llm.MODELS["llama_15m_8da4w_bf16"].build()
    scales = [t.scale for t in (m.weight for m in module.modules() if isinstance(m, torch.nn.Linear))
              if hasattr(t, "scale")]
    assert scales and all(s.dtype == torch.bfloat16 for s in scales)
    assert bench_llm.MODELS["llama_15m_8da4w_bf16"].backends == ("etc", "xnnpack")
