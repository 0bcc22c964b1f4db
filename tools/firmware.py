"""`make firmware` / `make run-firmware`: etc's take on ExecuTorch's Pico2 MNIST tutorial, on a
Cortex-M33 that QEMU emulates (mps2-an505), plus an int8 keyword-spotting DS-CNN.

    python -m etc.tools.firmware build [--model mnist|kws|all] [--board mps2-an505] [--out build/firmware]
    python -m etc.tools.firmware run   [--model mnist|kws|all] [--board mps2-an505] [--out build/firmware]

`build` makes each model, quantizes it to int8 (PT2E with `CpuQuantizer`: microcontrollers run
int8), compiles it for the board's core (`CpuPartitioner(target="cortex-m33")`), writes it as a C
library (`to_library`: mnist.h, libmnist.a), generates the firmware's main.c (the test inputs, the
outputs torch computed for them, the printing) and links it with etc's start-up code, linker script
and semihosting harness (`etc.targets.cpu.firmware`). It prints the library's size report and the
whole firmware's flash and RAM. `run` boots it under qemu-system-arm with instruction counting on:
it prints each input, the scores and the prediction, the instructions and stack one inference took,
and exits 0 only if every prediction matches the one torch made.

The MNIST-style model is an MLP (784 -> 64 -> 32 -> 10) trained here in a few seconds on synthetic
handwritten-like digits (strokes drawn with random slant, shift, thickness and noise: no dataset
download); the DS-CNN is the zoo's MLPerf Tiny keyword spotter with random weights (its "keyword" is
only the arg max of its scores, checked against torch).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

# Each digit as strokes (polylines) in a unit box, x right, y down.
_ARC = [(0.5 + 0.42 * np.sin(t), 0.5 - 0.48 * np.cos(t)) for t in np.linspace(0, 2 * np.pi, 17)]
STROKES = {
    0: [_ARC],
    1: [[(0.3, 0.2), (0.55, 0.0), (0.55, 1.0)]],
    2: [[(0.12, 0.22), (0.3, 0.02), (0.7, 0.02), (0.88, 0.22), (0.85, 0.42), (0.12, 1.0), (0.9, 1.0)]],
    3: [[(0.12, 0.05), (0.88, 0.05), (0.45, 0.45), (0.85, 0.62), (0.8, 0.9), (0.5, 1.0), (0.12, 0.9)]],
    4: [[(0.7, 1.0), (0.7, 0.0), (0.08, 0.65), (0.95, 0.65)]],
    5: [[(0.88, 0.02), (0.18, 0.02), (0.12, 0.45), (0.65, 0.4), (0.9, 0.65), (0.75, 0.95), (0.12, 0.95)]],
    6: [[(0.8, 0.02), (0.3, 0.35), (0.12, 0.72), (0.3, 0.98), (0.7, 0.98), (0.88, 0.72), (0.65, 0.5), (0.18, 0.6)]],
    7: [[(0.1, 0.02), (0.9, 0.02), (0.4, 1.0)], [(0.35, 0.5), (0.75, 0.5)]],
    8: [[(0.5 + 0.3 * np.sin(t), 0.26 - 0.24 * np.cos(t)) for t in np.linspace(0, 2 * np.pi, 13)],
        [(0.5 + 0.38 * np.sin(t), 0.74 - 0.26 * np.cos(t)) for t in np.linspace(0, 2 * np.pi, 13)]],
    9: [[(0.86, 0.45), (0.3, 0.5), (0.12, 0.25), (0.3, 0.02), (0.7, 0.02), (0.88, 0.25), (0.86, 0.45),
         (0.62, 1.0)]],
}
KEYWORDS = ("silence", "unknown", "yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")


def draw_digits(labels, rng) -> np.ndarray:
    """[n, 784] float32 images in [0, 1] of the digits `labels`: each stroke slanted, scaled, shifted
    and thickened at random, then noise."""
    ys, xs = np.mgrid[0:28, 0:28].astype(np.float32) + 0.5
    images = np.zeros((len(labels), 28, 28), np.float32)
    for n, label in enumerate(labels):
        slant, scale = rng.uniform(-0.25, 0.25), rng.uniform(0.75, 1.0)
        dx, dy, thickness = rng.uniform(-2.5, 2.5), rng.uniform(-2, 2), rng.uniform(0.9, 1.8)
        distance = np.full((28, 28), np.inf, np.float32)
        for stroke in STROKES[int(label)]:
            points = np.array([((x - 0.5) * 14 * scale + 14 + dx + slant * (0.5 - y) * 14, (y - 0.5) * 20 * scale
                                + 14 + dy) for x, y in stroke], np.float32)
            for (x0, y0), (x1, y1) in zip(points[:-1], points[1:]):
                vx, vy = x1 - x0, y1 - y0
                t = np.clip(((xs - x0) * vx + (ys - y0) * vy) / max(vx * vx + vy * vy, 1e-6), 0, 1)
                distance = np.minimum(distance, np.hypot(xs - (x0 + t * vx), ys - (y0 + t * vy)))
        images[n] = np.clip(1.0 + thickness - distance, 0, 1)
    images += rng.normal(0, 0.05, images.shape).astype(np.float32)
    return np.clip(images, 0, 1).reshape(len(labels), 784)


def mnist_mlp(steps: int = 400, seed: int = 0):
    """(the trained MLP, its accuracy on 1000 fresh synthetic digits)."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(steps):
        labels = rng.integers(0, 10, 128)
        loss = nn.functional.cross_entropy(model(torch.from_numpy(draw_digits(labels, rng))),
                                           torch.from_numpy(labels))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    labels = rng.integers(0, 10, 1000)
    with torch.no_grad():
        accuracy = float((model(torch.from_numpy(draw_digits(labels, rng))).argmax(1).numpy() == labels).mean())
    return model, accuracy


def _quantize(module, example: tuple, calibration: list):
    """PT2E int8 with etc's CpuQuantizer, calibrated on `calibration` (tuples of inputs)."""
    import torch
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from etc.targets.cpu import CpuQuantizer, get_symmetric_quantization_config

    quantizer = CpuQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    prepared = prepare_pt2e(torch.export.export(module.eval(), example).module(), quantizer)
    with torch.no_grad():
        for inputs in calibration:
            prepared(*inputs)
    converted = convert_pt2e(prepared)
    return converted, torch.export.export(converted, example)


def _floats(values) -> str:
    return ", ".join(float(v).hex() + "f" for v in np.asarray(values, np.float32).reshape(-1))


def _mnist(out: str, board):
    """(library, main.c text, what the run prints about the model) of the MNIST-style MLP."""
    import torch

    import etc
    from etc.targets.cpu import CpuPartitioner

    model, accuracy = mnist_mlp()
    rng = np.random.default_rng(7)
    shown = [0, 1, 4, 7]  # the digits the Pico2 tutorial shows
    images = draw_digits(shown, rng)
    calibration = [(torch.from_numpy(draw_digits(rng.integers(0, 10, 1), rng)),) for _ in range(64)]
    converted, ep = _quantize(model, (torch.from_numpy(images[:1]),), calibration)
    with torch.no_grad():
        scores = np.stack([converted(torch.from_numpy(image[None]))[0].numpy() for image in images])
        float_scores = model(torch.from_numpy(images)).numpy()
    edge = etc.to_edge(ep).to_backend(CpuPartitioner(target=board.preset))
    library = edge.to_library(os.path.join(out, "mnist"), "mnist")
    main = f"""/* main.c of the MNIST-style firmware (generated by etc.tools.firmware). */
#include "etc_firmware.h"
#include "mnist.h"

#define COUNT {len(shown)}
static const float images[COUNT][784] = {{{', '.join('{' + _floats(image) + '}' for image in images)}}};
static const int labels[COUNT] = {{{', '.join(str(d) for d in shown)}}};
static const int torch_predictions[COUNT] = {{{', '.join(str(int(s.argmax())) for s in scores)}}};
static float scores[MNIST_FORWARD_OUTPUT0_NUMEL];
static _Alignas(MNIST_ARENA_ALIGN) unsigned char arena[MNIST_ARENA_BYTES];

int main(void) {{
    int mismatches = 0;
    fw_ticks_start();
    for (int n = 0; n < COUNT; n++) {{
        fw_puts("=== digit "); fw_put_int(labels[n]); fw_puts(" ===\\n");
        for (int y = 0; y < 28; y += 2) {{  /* two rows a line: the characters are twice as tall as wide */
            for (int x = 0; x < 28; x++) {{
                float v = images[n][y * 28 + x] + images[n][(y + 1) * 28 + x];
                fw_puts(v > 1.0f ? "#" : v > 0.4f ? "+" : " ");
            }}
            fw_newline();
        }}
        fw_stack_paint();
        uintptr_t sp = fw_sp();
        uint64_t start = fw_instructions();
        int status = mnist_forward_run(images[n], scores, arena);
        uint64_t instructions = fw_instructions() - start;
        size_t stack = fw_stack_used(sp);
        if (status != MNIST_OK) {{ fw_puts("mnist_forward failed: "); fw_put_int(status); fw_newline(); return 2; }}
        int best = 0;
        for (int k = 0; k < 10; k++) {{
            fw_puts("  "); fw_put_int(k); fw_puts(": "); fw_put_float(scores[k], 3);
            if (scores[k] > scores[best]) best = k;
            if (k % 5 == 4) fw_newline();
        }}
        fw_puts("PREDICTED: "); fw_put_int(best); fw_puts(" (drawn: "); fw_put_int(labels[n]);
        fw_puts(best == labels[n] ? ", correct" : ", wrong"); fw_puts("; torch predicted ");
        fw_put_int(torch_predictions[n]); fw_puts(")"); fw_newline();
        fw_puts("inference: "); fw_put_int((long)instructions); fw_puts(" instructions, ");
        fw_put_int((long)stack); fw_puts(" bytes of stack"); fw_newline();
        mismatches += best != torch_predictions[n];
    }}
    fw_puts(mismatches ? "MISMATCH with torch\\n" : "all predictions match torch\\n");
    return mismatches ? 1 : 0;
}}
"""
    about = {"model": "MLP 784-64-32-10, int8 (PT2E, CpuQuantizer)", "synthetic_accuracy_float": accuracy,
             "torch_int8_predictions": [int(s.argmax()) for s in scores],
             "torch_float_predictions": [int(s.argmax()) for s in float_scores], "digits": shown}
    return library, main, about


def _kws(out: str, board):
    import torch

    import etc
    from etc.targets.cpu import CpuPartitioner

    from etc.models.zoo import ZOO

    zoo = ZOO["kws_dscnn"]()
    generator = torch.Generator().manual_seed(3)
    calibration = [(torch.randn(1, 1, 49, 10, generator=generator),) for _ in range(8)]
    converted, ep = _quantize(zoo.module, zoo.example_inputs, calibration)
    features = torch.randn(2, 1, 1, 49, 10, generator=generator)
    with torch.no_grad():
        scores = np.stack([converted(x)[0].numpy() for x in features])
    edge = etc.to_edge(ep).to_backend(CpuPartitioner(target=board.preset))
    library = edge.to_library(os.path.join(out, "kws"), "kws")
    names = ", ".join(f'"{k}"' for k in KEYWORDS)
    main = f"""/* main.c of the keyword-spotting firmware (generated by etc.tools.firmware). */
#include <math.h>
#include "etc_firmware.h"
#include "kws.h"

#define COUNT {len(features)}
static const float features[COUNT][490] = {{{', '.join('{' + _floats(x) + '}' for x in features)}}};
static const float torch_scores[COUNT][12] = {{{', '.join('{' + _floats(s) + '}' for s in scores)}}};
static const char *const keywords[12] = {{{names}}};
static float scores[KWS_FORWARD_OUTPUT0_NUMEL];
static _Alignas(KWS_ARENA_ALIGN) unsigned char arena[KWS_ARENA_BYTES];

int main(void) {{
    int mismatches = 0;
    fw_ticks_start();
    for (int n = 0; n < COUNT; n++) {{
        fw_stack_paint();
        uintptr_t sp = fw_sp();
        uint64_t start = fw_instructions();
        int status = kws_forward_run(features[n], scores, arena);
        uint64_t instructions = fw_instructions() - start;
        size_t stack = fw_stack_used(sp);
        if (status != KWS_OK) {{ fw_puts("kws_forward failed: "); fw_put_int(status); fw_newline(); return 2; }}
        int best = 0, torch_best = 0;
        float worst = 0.0f;
        for (int k = 0; k < 12; k++) {{
            if (scores[k] > scores[best]) best = k;
            if (torch_scores[n][k] > torch_scores[n][torch_best]) torch_best = k;
            float error = fabsf(scores[k] - torch_scores[n][k]);
            if (error > worst) worst = error;
        }}
        fw_puts("clip "); fw_put_int(n); fw_puts(": keyword '"); fw_puts(keywords[best]); fw_puts("' (score ");
        fw_put_float(scores[best], 3); fw_puts("; torch: '"); fw_puts(keywords[torch_best]);
        fw_puts("', largest score difference "); fw_put_float(worst, 4); fw_puts(")"); fw_newline();
        fw_puts("inference: "); fw_put_int((long)instructions); fw_puts(" instructions, ");
        fw_put_int((long)stack); fw_puts(" bytes of stack"); fw_newline();
        mismatches += best != torch_best;
    }}
    fw_puts(mismatches ? "MISMATCH with torch\\n" : "all keywords match torch\\n");
    return mismatches ? 1 : 0;
}}
"""
    about = {"model": "DS-CNN (MLPerf Tiny keyword spotting, random weights), int8 (PT2E, CpuQuantizer)",
             "torch_int8_keywords": [KEYWORDS[int(s.argmax())] for s in scores]}
    return library, main, about


MODELS = {"mnist": _mnist, "kws": _kws}


def build(model: str, board_name: str, out: str) -> dict:
    from etc.targets.cpu import firmware

    board = firmware.board(board_name)
    directory = os.path.join(out, model)
    os.makedirs(directory, exist_ok=True)
    library, main, about = MODELS[model](out, board)
    source = os.path.join(directory, "main.c")
    with open(source, "w") as f:
        f.write(main)
    built = firmware.build_firmware(os.path.join(directory, f"{model}.elf"), [source], [library], board,
                                    extra_flags=["-Werror"])
    print(built.size_report())
    record = {"board": board.machine, "elf": built.elf, "library": library.sizes,
              "firmware": {k: v for k, v in built.sizes.items() if k != "symbols"}, **about}
    with open(os.path.join(directory, "firmware.json"), "w") as f:
        json.dump(record, f, indent=1)
    print(f"wrote {built.elf} (run it: make run-firmware, or python -m etc.tools.firmware run --model {model})")
    return record


def run(model: str, board_name: str, out: str) -> int:
    from etc.targets.cpu import firmware

    elf = os.path.join(out, model, f"{model}.elf")
    if not os.path.exists(elf):
        print(f"{elf} is not built: make firmware (python -m etc.tools.firmware build --model {model})",
              file=sys.stderr)
        return 1
    print(" ".join(firmware.qemu_command(elf, board_name, icount=True)))
    done = firmware.run_firmware(elf, board_name, icount=True)
    print(done.stdout, end="")
    print(f"exit status {done.returncode}")
    return done.returncode


def main(argv=None) -> int:
    import warnings

    warnings.filterwarnings("ignore")
    parser = argparse.ArgumentParser(prog="python -m etc.tools.firmware", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("build", "run"))
    parser.add_argument("--model", choices=(*MODELS, "all"), default="all")
    parser.add_argument("--board", default="mps2-an505")
    parser.add_argument("--out", default=os.path.join("build", "firmware"))
    args = parser.parse_args(argv)
    from etc.errors import EtcError

    models = list(MODELS) if args.model == "all" else [args.model]
    try:
        if args.command == "build":
            for model in models:
                build(model, args.board, os.path.join(args.out, args.board))
            return 0
        return max(run(model, args.board, os.path.join(args.out, args.board)) for model in models)
    except EtcError as error:
        print(f"etc firmware: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
