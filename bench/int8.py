"""Int8 models: etc cpu on a CpuQuantizer program against ExecuTorch + XNNPACK on an XNNPACKQuantizer one.

For each zoo CNN (static int8), each real vision model at 224 (`REAL`: transformers' MobileNetV2,
ResNet-50 and EfficientNet-lite0, random weights, batch norm calibrated) and each transformer layer
at its real size (`DYNAMIC`: the dynamic config, int8 activations quantized on every call, the
transformers flow), in one child process (a
crash of a compiler under test is a row): the model quantized with PT2E twice, calibrated on the
same inputs (`etc.models.quantized.quantize`), once with etc's `CpuQuantizer` (compiled by etc's
cpu target) and once with ExecuTorch's `XNNPACKQuantizer` (lowered to XNNPACK), with the same
config; the fp32 model on both too. One thread each, the four calls interleaved
(`layers.interleaved`: CPU time of the calling thread), plus etc's SQNR against the eager
quantized model, XNNPACK's against its own (deep random-weight networks lose ~20 dB to int8
rounding flips alone: the yardstick for etc's) and how many ops stayed on portable kernels.

    python -m etc.bench.int8 [--only small_cnn,resnet8] [--runs N]
"""

from __future__ import annotations

import argparse
import sys
import time

from etc.bench.common import emit, error_text, executorch_method, executorch_program, executorch_threads, interleaved, \
    ms, ratio, run_child

CNNS = ("small_cnn", "mobilenet_v2", "mobilenet_v1_025", "resnet8", "kws_dscnn", "resnet18")


def _ffn():
    """BERT-base's feed-forward block (768 -> 3072, GELU, -> 768) over 128 tokens."""
    import torch
    from torch import nn

    from etc.models.zoo import ZooModel

    model = nn.Sequential(nn.Linear(768, 3072), nn.GELU(), nn.Linear(3072, 768))
    return ZooModel("ffn_768_t128", model, (torch.randn(1, 128, 768),))


def _encoder_layer():
    """One BERT-base encoder layer (768 wide, 12 heads, FFN 3072) over 128 tokens: its four
    projections and two FFN linears quantized, attention's matmuls float."""
    import torch
    from torch import nn

    from etc.models.zoo import ZooModel

    model = nn.TransformerEncoderLayer(768, 12, 3072, dropout=0.0, batch_first=True)
    return ZooModel("encoder_layer_768_t128", model, (torch.randn(1, 128, 768),))


# Dynamic int8 rows: name -> model builder (seeded in the child).
DYNAMIC = {"ffn_768_t128": _ffn, "encoder_layer_768_t128": _encoder_layer}


def _efficientnet_lite(model) -> None:
    """EfficientNet-lite0 from transformers' EfficientNet-B0 (transformers has no lite config): lite is B0
    with its squeeze-excitation blocks removed and ReLU6 for swish (`hidden_act="relu6"` below); the stem
    and head B0 already has at width 1.0. The pooler as the bench of real models measures it (a mean)."""
    from torch import nn

    from etc.bench.hf_models import _global_mean_pooler

    _global_mean_pooler(model)
    for block in model.efficientnet.encoder.blocks:
        block.squeeze_excite = nn.Identity()


def _real(name: str, build):
    """A real vision model at 224 (transformers' architecture, random weights, BN calibrated: the
    builders of `bench/hf_models.py`) as a ZooModel."""
    def make():
        from etc.models.zoo import ZooModel

        module, inputs = build()
        return ZooModel(name, module, inputs, is_cnn=True)
    return make


def _real_models() -> dict:
    from etc.bench.hf_models import MODELS, _image

    return {
        "mobilenet_v2_224": _real("mobilenet_v2_224", MODELS["mobilenet_v2"].build),
        "resnet50_224": _real("resnet50_224", MODELS["resnet50"].build),
        "efficientnet_lite0_224": _real("efficientnet_lite0_224", _image(
            "EfficientNetForImageClassification", "EfficientNetConfig", 224, adjust=_efficientnet_lite,
            image_size=224, width_coefficient=1.0, depth_coefficient=1.0, hidden_dim=1280, dropout_rate=0.2,
            hidden_act="relu6", num_labels=1000)),
    }


# Static int8 rows at real sizes (ImageNet's 224 x 224): name -> model builder.
REAL = ("mobilenet_v2_224", "resnet50_224", "efficientnet_lite0_224")


def measure(name: str, runs: int, budget_s: float = 3.0) -> None:
    """In the child: JSON lines (common's protocol: emit, run_child) with the four latencies and the numerics."""
    import warnings

    warnings.filterwarnings("ignore")
    import numpy as np
    import torch

    import etc
    from etc.runtime import Runtime
    from etc.targets.cpu import CpuPartitioner
    from etc.models.quantized import quantize, sqnr
    from etc.models.zoo import BENCH_ONLY, ZOO

    torch.set_num_threads(1)
    dynamic = name in DYNAMIC
    torch.manual_seed(0)
    zoo_model = DYNAMIC[name]() if dynamic else {**ZOO, **BENCH_ONLY, **_real_models()}[name]()
    zoo_model.module.eval()
    inputs = list(zoo_model.example_inputs)
    np_inputs = [x.numpy() for x in inputs]
    emit(name=name, stage="quantizing")
    converted, ep = quantize(zoo_model, is_dynamic=dynamic)
    calls = {}

    def etc_call(programs, key):
        edge = etc.to_edge(programs).to_backend(CpuPartitioner(num_threads=1))
        portable = sum(sum(r.portable.values()) for r in edge.delegation_reports)
        buffer = edge.to_executorch().buffer
        emit(**{f"{key}_pte_bytes": len(buffer)})
        method = Runtime.get().load_program(buffer).load_method("forward")
        calls[key] = lambda: method.execute(np_inputs)
        return method, portable

    emit(stage="etc int8")
    method, portable = etc_call(ep, "etc_int8")
    with torch.no_grad():
        want = converted(*inputs)
    emit(etc_portable_ops=portable, etc_sqnr=sqnr(want, torch.as_tensor(np.asarray(method.execute(np_inputs)[0]))))
    emit(stage="etc fp32")
    etc_call(zoo_model.export(), "etc_fp32")
    try:
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (XNNPACKQuantizer,
                                                                              get_symmetric_quantization_config)

        executorch_threads(1)
        emit(stage="xnnpack int8")
        quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True,
                                                                                    is_dynamic=dynamic))
        xconverted, xep = quantize(zoo_model, quantizer=quantizer)
        for key, programs in (("xnnpack_int8", xep), ("xnnpack_fp32", zoo_model.export())):
            program = executorch_program(programs, xnnpack=True)
            emit(**{f"{key}_pte_bytes": len(program.buffer)})
            et_method = executorch_method(program)
            calls[key] = (lambda m: lambda: m.execute(inputs))(et_method)
            if key == "xnnpack_int8":  # XNNPACK's own distance from its eager quantized model: etc's yardstick
                with torch.no_grad():
                    xwant = xconverted(*inputs)
                emit(xnnpack_sqnr=sqnr(xwant, torch.as_tensor(np.asarray(et_method.execute(inputs)[0]))))
    except Exception as e:  # noqa: BLE001 - ExecuTorch missing or failing: its columns are n/a
        emit(xnnpack_error=error_text(e, 100))
    emit(stage="timing")
    cpu, _ = interleaved(calls, runs, budget_s, warmup=3)
    emit(**cpu)
    emit(stage="done")


def run(names: list[str] | None = None, runs: int = 20, timeout_s: float = 900.0, log=sys.stderr) -> str:
    rows = []
    for name in names or (*CNNS, *REAL, *DYNAMIC):
        print(f"[bench_int8] {name}", file=log, flush=True)
        start = time.perf_counter()
        row, failure = run_child([sys.executable, "-m", "etc.bench.int8", "--child", name, "--runs",
                                  str(runs)], timeout_s)
        row["name"], row["failure"] = name, failure
        print(f"[bench_int8] {name}: {time.perf_counter() - start:.0f} s", file=log, flush=True)
        rows.append(row)
    return render(rows)


def _db(s) -> str:
    return "n/a" if s is None else ("exact" if s == float("inf") else f"{s:.1f}")


def render(rows: list[dict]) -> str:
    lines = ["| model | quantization | etc cpu int8 | etc cpu fp32 | XNNPACK int8 | XNNPACK fp32 | etc int8 vs XNNPACK int8 "
             "| etc int8 vs etc fp32 | etc int8 SQNR vs eager int8 (dB) | XNNPACK int8 SQNR vs its eager int8 (dB) "
             "| ops on portable | etc int8 .pte bytes "
             "| XNNPACK int8 .pte bytes | size etc/XNNPACK |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for r in rows:
        int8, fp32, x8, xf = (r.get(k) for k in ("etc_int8", "etc_fp32", "xnnpack_int8", "xnnpack_fp32"))
        kind = "dynamic (activations per call)" if r["name"] in DYNAMIC else "static"
        lines.append(f"| {r['name']} | {kind} | {ms(int8)} | {ms(fp32)} | {ms(x8)} | {ms(xf)} | {ratio(int8, x8)} | "
                     f"{ratio(int8, fp32)} | {_db(r.get('etc_sqnr'))} | {_db(r.get('xnnpack_sqnr'))} "
                     f"| {r.get('etc_portable_ops', 'n/a')} | {r.get('etc_int8_pte_bytes', 'n/a')} | "
                     f"{r.get('xnnpack_int8_pte_bytes', 'n/a')} | "
                     f"{ratio(r.get('etc_int8_pte_bytes'), r.get('xnnpack_int8_pte_bytes'))} |")
        for key in ("failure", "xnnpack_error"):
            if r.get(key):
                notes.append(f"- {r['name']}: {key.replace('_', ' ')}: {r[key]}")
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated names (default: all): " + ", ".join((*CNNS, *REAL, *DYNAMIC)))
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        measure(args.child, args.runs)
        return 0
    print(run(args.only.split(",") if args.only else None, args.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
