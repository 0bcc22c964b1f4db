"""The int8 bench section (bench/int8.py): its table, and that the module needs no bench-only
dependency to import (`make bench` measures; the measuring child is exercised there)."""

import subprocess
import sys

from etc.bench.int8 import render


def test_imports_without_bench_only_dependencies():
    code = ("import sys, etc.bench.int8; "
            "print(sorted(m for m in ('executorch', 'transformers', 'torchao') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_table_gives_ratios_numerics_and_failures():
    text = render([
        {"name": "resnet8", "etc_int8": 2e-4, "etc_fp32": 4e-4, "xnnpack_int8": 1e-4, "xnnpack_fp32": 2e-4,
         "etc_sqnr": float("inf"), "xnnpack_sqnr": 30.04, "etc_portable_ops": 0, "etc_int8_pte_bytes": 1500, "xnnpack_int8_pte_bytes": 1000,
         "failure": None},
        {"name": "kws_dscnn", "etc_int8": 1e-4, "etc_sqnr": 41.25, "etc_portable_ops": 2,
         "xnnpack_error": "RuntimeError: no", "failure": None},
        {"name": "broken", "failure": "crashed (signal 11) in etc int8"},
        {"name": "ffn_768_t128", "etc_int8": 5e-3, "xnnpack_int8": 4e-3, "failure": None}])
    rows = text.splitlines()
    assert rows[2] == ("| resnet8 | static | 0.200 | 0.400 | 0.100 | 0.200 | 2.00x | 0.50x | exact | 30.0 | 0 | 1500 | 1000 "
                       "| 1.50x |")
    assert rows[3] == "| kws_dscnn | static | 0.100 | n/a | n/a | n/a | n/a | n/a | 41.2 | n/a | 2 | n/a | n/a | n/a |"
    assert rows[5].startswith("| ffn_768_t128 | dynamic (activations per call) | 5.000 | n/a | 4.000 | n/a | 1.25x |")
    assert "- kws_dscnn: xnnpack error: RuntimeError: no" in text
    assert "- broken: failure: crashed (signal 11) in etc int8" in text
