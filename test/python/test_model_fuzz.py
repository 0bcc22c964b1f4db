"""The compiler fuzzer (model_fuzzer.py) in every `make test`: a fixed-seed budget of random
models, each exported, compiled portable and for the cpu target (one thread, two threads,
profile=True), run at several sizes within its bounds and compared with torch eager; plus the
harness's own tests (it sees crashes, hangs and wrong outputs, and shrinks a failure to a minimal
model with a reproduction script that runs on its own). `make fuzz-compiler` runs thousands.

The regression tests of what the fuzzer found live with the code they test (see FUZZING.md).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import model_fuzzer

# Models per shard (two shards: pytest -n 2 runs them on both cores), a fixed seed each: about a
# minute of the suite's wall time on two cores; `make fuzz-compiler` is where thousands run.
CI_MODELS = 30


@pytest.mark.parametrize("shard", [0, 1])
def test_random_models_compute_what_eager_computes(shard):
    stats = model_fuzzer.fuzz(CI_MODELS, seed=shard, configs=model_fuzzer.ROTATE, timeout=600)
    print(stats.summary())
    assert stats.models == CI_MODELS
    assert stats.statuses["ok"] == CI_MODELS


def _model(source: str) -> dict:
    return {"source": source, "dtype": "float32", "dims": {}, "seed": 0, "ops": ["unary"], "calls": [{}],
            "methods": [{"name": "forward", "inputs": [{"name": "x0", "shape": [[3, []]], "dtype": "float",
                                                        "layout": "contiguous", "high": 0}],
                         "outputs": [{"exact": True, "err": 0.0}]}]}


_DIES = ("import os, signal, torch\n"
         "class Model(torch.nn.Module):\n"
         "    def forward(self, x0):\n"
         "        os.kill(os.getpid(), signal.SIGSEGV)\n")
_HANGS = ("import time, torch\n"
          "class Model(torch.nn.Module):\n"
          "    def forward(self, x0):\n"
          "        time.sleep(3600)\n")


@pytest.mark.parametrize("source, status, timeout", [(_DIES, "crash", 120), (_HANGS, "hang", 8)])
def test_the_harness_sees_crashes_and_hangs(source, status, timeout):
    pool = model_fuzzer.Pool()
    try:
        result = pool.run(_model(source), ["portable"], timeout)
    finally:
        pool.close()
    assert result["status"] == status, result
    assert result["stage"] in ("export", "start"), result


def test_a_wrong_output_shrinks_to_a_minimal_model_and_a_script_that_runs(tmp_path):
    """Every program computing wrong (the child adds 1 to each output): the failure shrinks to a
    one-op float32 model, and its reproduction script runs on its own (here, without the fault,
    it passes)."""
    from model_gen import models

    with pytest.raises(model_fuzzer.FuzzFailure) as failure:
        model_fuzzer.fuzz(5, seed=0, configs=("portable",), strategy=models(max_ops=3, max_methods=1,
                                                                            dtypes=("float32",)),
                          fault="wrong-outputs", timeout=300)
    message = str(failure.value)
    assert message.startswith("mismatch [portable] at run: method 'forward' call 0 output 0"), message[:500]
    script = message[message.index('"""etc compiler fuzzer finding'):]
    forward = script[script.index("    def forward"):script.index("# ---- the check")]
    assert len([line for line in forward.splitlines() if " = " in line]) <= 2, forward  # one op (and a size)
    (tmp_path / "repro.py").write_text(script)
    run = subprocess.run([sys.executable, str(tmp_path / "repro.py")], capture_output=True, text=True, timeout=600,
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": ""})
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.startswith("ok done"), run.stdout


def test_generated_models_are_valid_for_torch():
    """The generator's side of the contract, without compiling: torch exports every model and
    runs it eagerly at every size (an `invalid` result is the generator's bug, never etc's)."""
    import model_check
    from hypothesis import HealthCheck, given, settings
    from model_gen import models

    @settings(max_examples=25, database=None, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(models())
    def valid(spec):
        model = model_check.build(spec)
        exported = model_check.export_methods(spec, model)
        model_check.eager_outputs(spec, exported)

    valid()


def test_the_generator_draws_many_models_without_an_error_of_its_own():
    """Drawing only (no torch): a generator bug shows in seconds, not after an hour of fuzzing. A
    thousand draws: hypothesis's draws are correlated, and 600 once drew no conv block at all."""
    from hypothesis import HealthCheck, Phase, given, settings
    from model_gen import models

    drawn = []

    @settings(max_examples=1000, database=None, deadline=None, derandomize=True, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(models())
    def draw(spec):
        compile(spec["source"], "<model>", "exec")
        drawn.append(spec)

    draw()
    assert len(drawn) == 1000
    ops = {op for spec in drawn for op in spec["ops"]}
    assert {"attention", "conv_block", "cond", "while", "state", "index_put", "gather"} <= ops, ops


def test_sizes_of_the_generator_are_products_of_dims():
    from model_gen import Size, broadcast

    b, t = Size(1, ("b",)), Size(1, ("t",))
    assert (b * t * Size(4)).text() == "4*b*t"
    assert (b * t).bounds({"b": (1, 8), "t": (2, 5)}) == (2, 40)
    assert broadcast((b, Size(4)), (Size(1), Size(4))) == (b, Size(4))
    assert broadcast((b, Size(4)), (t, Size(4))) is None  # two Dims: not provably equal


_SCALES = ("import torch\n"
           "class Model(torch.nn.Module):\n"
           "    def forward(self, x0):\n"
           "        return (x0 * 2.0 + 1.0,)\n")


def test_the_library_configuration_runs_c_and_sees_a_wrong_output(tmp_path):
    """The "library" configuration: the model as a C library called from a C harness, compared with
    eager in C; an eager reference one off is a Mismatch (the harness really compares)."""
    import model_check

    spec = _model(_SCALES)
    spec["methods"][0]["outputs"][0].update(exact=False, err=4.0)
    model = model_check.build(spec)
    exported = model_check.export_methods(spec, model)
    reference = model_check.eager_outputs(spec, exported)
    edge = model_check.to_edge(exported)
    assert model_check.check_library(spec, edge, reference, {"forward": 0.0}, str(tmp_path / "good")) == "ran"
    wrong = {"forward": [[o + 1 for o in call] for call in reference["forward"]]}
    with pytest.raises(model_check.Mismatch, match="C harness failed"):
        model_check.check_library(spec, edge, wrong, {"forward": 0.0}, str(tmp_path / "bad"))
