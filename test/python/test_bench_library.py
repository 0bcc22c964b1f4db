"""The native-library bench section (bench/library.py): its tables, and its two measuring programs on
a tiny model (the C timer on the host, the instruction-counting firmware under QEMU); `make bench` runs
them on the zoo."""

import subprocess

import torch
from torch import nn

import etc
from etc.targets.cpu import CpuPartitioner, firmware
from etc.bench.library import c_timer, firmware_main, render_cortex_m, render_host


def test_host_table_gives_ratios_and_the_models_slower_than_xnnpack():
    text = render_host([
        {"name": "a", "library": 2e-6, "etc": 10e-6, "xnnpack": 8e-6, "eager": 30e-6, "code": 2048, "weights": 1024,
         "arena": 512},
        {"name": "b", "library": 9e-6, "etc": 12e-6, "xnnpack": 6e-6, "eager": 30e-6, "code": 0, "weights": 0,
         "arena": 0},
        {"name": "c", "error": "RuntimeError: no"}])
    rows = text.splitlines()
    assert rows[4] == "| a | 2.0 | 10.0 | 8.0 | 30.0 | 0.25x | 0.20x | 2.0 | 1.0 | 0.5 |"
    assert rows[6] == "| c | RuntimeError: no |||||||||"
    assert "Geomean library / XNNPACK over 2 models: 0.61x; slower than XNNPACK: b." in text


def test_cortex_m_table():
    text = render_cortex_m([{"name": "kws", "core": "cortex-m33", "dtype": "int8", "instructions": 1234567,
                             "code": 1024, "weights": 2048, "arena": 4096, "stack_bound": 400, "stack": 420,
                             "flash": 8192, "ram": 5120}])
    assert "| kws | cortex-m33 | int8 | 1,234,567 | 1.0 | 2.0 | 4.0 | 400 / 420 | 8.0 | 5.0 |" in text


def _tiny(tmp_path, target):
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()
    x = torch.randn(2, 8)
    edge = etc.to_edge(torch.export.export(module, (x,))).to_backend(CpuPartitioner(target=target))
    return edge.to_library(tmp_path / "lib", "model", verbose=False), [x.numpy()]


def test_the_c_timer_measures_a_library(tmp_path):
    library, inputs = _tiny(tmp_path, "host")
    source = tmp_path / "timer.c"
    source.write_text(c_timer(library, "forward", inputs, str(tmp_path)))
    binary = tmp_path / "timer"
    subprocess.run([firmware.require_tool("gcc"), "-O2", "-std=c11", f"-I{library.directory}", str(source),
                    library.archive, "-o", str(binary)], check=True, capture_output=True)
    seconds = float(subprocess.run([str(binary), "5"], capture_output=True, text=True, check=True).stdout)
    assert 0 < seconds < 1e-3


def test_the_firmware_counts_instructions_and_stack(tmp_path):
    library, inputs = _tiny(tmp_path, "cortex-m33")
    source = tmp_path / "main.c"
    source.write_text(firmware_main(library, "forward", inputs))
    built = firmware.build_firmware(str(tmp_path / "bench.elf"), [str(source)], [library], "mps2-an505",
                                    extra_flags=["-Werror"])
    done = firmware.run_firmware(built.elf, "mps2-an505", icount=True)
    words = done.stdout.split()
    assert done.returncode == 0, done.stdout
    instructions = int(words[words.index("instructions") + 1])
    # 2x8x16 + 2x16x4 multiply-adds in plain loops: a few instructions each, and far from a wrapped count
    assert 2 * (8 * 16 + 16 * 4) <= instructions < 100_000
    assert 0 < int(words[words.index("stack") + 1]) <= library.sizes["stack_bytes"] + 256
