"""Depthwise convolutions and poolings at real sizes: etc-cpu-window-kernels vs torch vs
ExecuTorch+XNNPACK, one thread each, medians in one run (the machine is shared: compare ratios).
XNNPACK is timed twice: on the NCHW input (the delegate converts to NHWC and back around the one
op) and on a channels-last input (no conversion: its kernel alone, as inside an NHWC subgraph).

    .venv/bin/python -m etc.bench.windows [--options '{rows=2}'] [--no-xnnpack] [--filter dw]
"""

from __future__ import annotations

import argparse
import statistics
import sys

from etc.bench.common import executorch_method, executorch_program, executorch_threads, median_seconds

CASES = [  # (name, module factory, input shape)
    ("dw3x3/2 96@112 +BN+ReLU6", lambda nn: nn.Sequential(nn.Conv2d(96, 96, 3, 2, 1, groups=96), nn.BatchNorm2d(96),
                                                          nn.ReLU6()), (1, 96, 112, 112)),
    ("dw3x3/1 32@112 +BN+ReLU6", lambda nn: nn.Sequential(nn.Conv2d(32, 32, 3, 1, 1, groups=32), nn.BatchNorm2d(32),
                                                          nn.ReLU6()), (1, 32, 112, 112)),
    ("dw3x3/1 144@56 +BN+ReLU6", lambda nn: nn.Sequential(nn.Conv2d(144, 144, 3, 1, 1, groups=144),
                                                          nn.BatchNorm2d(144), nn.ReLU6()), (1, 144, 56, 56)),
    ("dw3x3/1 384@14 +BN+ReLU6", lambda nn: nn.Sequential(nn.Conv2d(384, 384, 3, 1, 1, groups=384),
                                                          nn.BatchNorm2d(384), nn.ReLU6()), (1, 384, 14, 14)),
    ("dw3x3/1 960@7 +BN+ReLU6", lambda nn: nn.Sequential(nn.Conv2d(960, 960, 3, 1, 1, groups=960),
                                                         nn.BatchNorm2d(960), nn.ReLU6()), (1, 960, 7, 7)),
    ("dw5x5/2 144@56", lambda nn: nn.Conv2d(144, 144, 5, 2, 2, groups=144), (1, 144, 56, 56)),
    ("dw5x5/1 672@14", lambda nn: nn.Conv2d(672, 672, 5, 1, 2, groups=672), (1, 672, 14, 14)),
    ("dw7x7/1 96@56 (ConvNeXt)", lambda nn: nn.Conv2d(96, 96, 7, 1, 3, groups=96), (1, 96, 56, 56)),
    ("dw7x7/1 768@7 (ConvNeXt)", lambda nn: nn.Conv2d(768, 768, 7, 1, 3, groups=768), (1, 768, 7, 7)),
    ("maxpool3x3/2 64@112", lambda nn: nn.MaxPool2d(3, 2, 1), (1, 64, 112, 112)),
    ("maxpool2x2/2 64@56", lambda nn: nn.MaxPool2d(2, 2), (1, 64, 56, 56)),
    ("avgpool3x3/2 64@56", lambda nn: nn.AvgPool2d(3, 2, 1), (1, 64, 56, 56)),
    ("avgpool2x2/2 256@28", lambda nn: nn.AvgPool2d(2, 2), (1, 256, 28, 28)),
]


def median_ms(fn, runs: int = 30, budget_s: float = 1.0) -> float:
    return median_seconds(fn, runs=runs, budget_s=budget_s) * 1e3


def xnnpack_method(model, x):
    import torch

    return executorch_method(executorch_program({"forward": torch.export.export(model, (x,))}, xnnpack=True))


def main(argv=None) -> int:
    import numpy as np
    import torch
    import torch.nn as nn

    from etc.bench.window_jit import compile_model

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--options", default="", help="pass options, e.g. '{rows=2 lanes=16}'")
    parser.add_argument("--no-xnnpack", action="store_true")
    parser.add_argument("--filter", default="")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if not args.no_xnnpack:
        executorch_threads(1)
    print("| op | etc ms | torch 1t ms | XNNPACK 1t ms | XNNPACK NHWC 1t ms | torch / etc | XNNPACK / etc "
          "| XNNPACK NHWC / etc | max abs err |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, factory, shape in CASES:
        if args.filter not in name:
            continue
        torch.manual_seed(0)
        model = factory(nn).eval()
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                with torch.no_grad():
                    m.running_mean.uniform_(-1, 1)
                    m.running_var.uniform_(0.5, 2)
        x = torch.randn(*shape)
        fn, inputs, _ = compile_model(model, x, args.options)
        with torch.no_grad():
            want = model(x).numpy()
        outs = [np.empty_like(want)]
        err = float(np.abs(fn(*inputs)[0] - want).max())
        xnn = xnn_nhwc = None
        if not args.no_xnnpack:
            try:
                method = xnnpack_method(model, x)
                xnn = lambda: method.execute([x])  # noqa: E731
                x_nhwc = x.contiguous(memory_format=torch.channels_last)
                method_nhwc = xnnpack_method(model, x_nhwc)
                xnn_nhwc = lambda: method_nhwc.execute([x_nhwc])  # noqa: E731
            except Exception as e:  # noqa: BLE001
                print(f"XNNPACK failed on {name}: {e}", file=sys.stderr)
        samples = {"etc": [], "torch": [], "xnn": [], "xnn_nhwc": []}
        with torch.no_grad():
            for _ in range(3):  # interleaved rounds, median of the medians
                samples["etc"].append(median_ms(lambda: fn(*inputs, outputs=outs)))
                samples["torch"].append(median_ms(lambda: model(x)))
                if xnn:
                    samples["xnn"].append(median_ms(xnn))
                    samples["xnn_nhwc"].append(median_ms(xnn_nhwc))
        t_etc = statistics.median(samples["etc"])
        t_torch = statistics.median(samples["torch"])
        t_xnn = statistics.median(samples["xnn"]) if samples["xnn"] else float("nan")
        t_nhwc = statistics.median(samples["xnn_nhwc"]) if samples["xnn_nhwc"] else float("nan")
        print(f"| {name} | {t_etc:.3f} | {t_torch:.3f} | {t_xnn:.3f} | {t_nhwc:.3f} | {t_torch / t_etc:.2f} | "
              f"{t_xnn / t_etc:.2f} | {t_nhwc / t_etc:.2f} | {err:.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
