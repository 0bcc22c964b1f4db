"""etc-opt's pieces in-process: input splitting and wrapping, expected-diagnostic checking, main()."""

from __future__ import annotations

import pytest

from etc.dialects import make_context
from etc.tools import etc_opt
from etc.tools.etc_opt import Diag, split_input, wrap_in_module, check_expectations, parse_expectations, parse_input


def test_split_keeps_line_numbers():
    text = "a\n// -----\nb\nc\n  // -----  \nd"
    chunks = split_input(text, True)
    assert [c.split("\n").index(c.strip().split("\n")[0]) for c in chunks] == [0, 2, 5]
    assert split_input(text, False) == [text]


def test_wrap_keeps_lines_and_trailing_aliases():
    text = "// comment\nfunc.func @a() {\n  return\n}\nfunc.func @b() {\n  return\n}\n#loc = loc(\"x\":1:1)\n"
    wrapped = wrap_in_module(text)
    assert wrapped.split("\n")[0] == "module {"
    assert wrapped.split("\n")[1:7] == text.split("\n")[1:6] + ["} }"]
    assert len(wrapped.split("\n")) == len(text.split("\n"))


def test_parse_input_wraps_several_ops_with_file_locations():
    context = make_context()
    text = "\n\nfunc.func @a() {\n  return\n}\nfunc.func @b() {\n  return\n}\n"
    module = parse_input(text, "in.mlir", context)
    assert module.name == "builtin.module"
    functions = list(module.regions[0].blocks[0].operations)
    assert [str(f.location) for f in functions] == ['loc("in.mlir":3:1)', 'loc("in.mlir":6:1)']
    single = parse_input("func.func @only() {\n  return\n}", "in.mlir", context)
    assert single.name == "builtin.module"
    assert parse_input("// nothing\n", "in.mlir", context).name == "builtin.module"


def test_expectations_positions():
    text = ("x // expected-error {{same line}}\n"
            "// expected-warning @below {{below}}\n"
            "// expected-note @below {{below too}}\n"
            "target\n"
            "// expected-remark @-3 {{minus}}\n"
            "// expected-error @above {{above}}\n"
            "// expected-error-re @unknown {{un{{k+}}nown}}\n")
    found = [(e.severity, e.text, e.line, e.regex) for e in parse_expectations(text)]
    assert found == [("error", "same line", 1, False), ("warning", "below", 4, False),
                     ("note", "below too", 4, False), ("remark", "minus", 2, False),
                     ("error", "above", 4, False), ("error", "un{{k+}}nown", None, True)]


def test_check_expectations_reports_both_ways():
    expectations = parse_expectations("a\n// expected-error @-1 {{boom}}\n// expected-warning {{never}}\n")
    diags = [Diag("error", "it went boom", "f.mlir:1:3"), Diag("warning", "surprise", "f.mlir:2:1"),
             Diag("error", "unknown place", None)]
    problems = [p.render() for p in check_expectations(diags, expectations, "f.mlir")]
    assert problems == ["f.mlir:2:1: error: unexpected warning: surprise",
                        "error: unexpected error: unknown place",
                        'f.mlir:3:4: error: expected warning "never" was not produced']
    regex = parse_expectations("// expected-error-re @unknown {{a {{[0-9]+}} b}}\n")
    assert check_expectations([Diag("error", "x a 42 b", None)], regex, "f.mlir") == []


def test_main_in_process(tmp_path, capsys):
    source = tmp_path / "in.mlir"
    source.write_text('func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n'
                      '  %0 = "aten.neg"(%x) : (tensor<4xf32>) -> tensor<4xf32>\n'
                      '  return %x : tensor<4xf32>\n}\n')
    out = tmp_path / "out.mlir"
    assert etc_opt.main([str(source), "--etc-dce", "-o", str(out)]) == 0
    assert "aten.neg" not in out.read_text() and "func.func @f" in out.read_text()
    out.unlink()
    assert etc_opt.main(["-pass-pipeline", "builtin.module(etc-dce)", "-split-input-file", str(source),
                         "-o", str(out)]) == 0  # mlir-opt's one-dash spelling
    assert "aten.neg" not in out.read_text()
    assert etc_opt.main([str(source), "--etc-dec"]) == 1
    assert "did you mean '--etc-dce'" in capsys.readouterr().err
    assert etc_opt.main(["--list-passes"]) == 0
    assert "etc-memory-planning" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--pass-pipeline=builtin.module(etc-dce", "IN"], "<pass-pipeline>:1:23: error: expected ')'"),
    (["IN", "--etc-memory-planning=alignment=x"], "error: option 'alignment' of etc-memory-planning expects"),
    (["IN", "--cse", "--pass-pipeline=cse"], "cannot be combined"),
])
def test_main_user_errors(tmp_path, capsys, argv, message):
    source = tmp_path / "in.mlir"
    source.write_text("func.func @f() {\n  return\n}\n")
    argv = [str(source) if a == "IN" else a for a in argv]
    assert etc_opt.main(argv) == 1
    assert message in capsys.readouterr().err


def test_import_model_output_takes_the_edge_pipeline_once_decomposed(tmp_path, capsys):
    """etc-opt on tools/import_model's output said conv2d "has no decomposition" (issue 24): the
    printed module is the exported graph before to_edge's decompositions. The error now says so,
    and `--decompose` prints the decomposed program, which the edge pipeline takes (batch norm
    unfused, with a warning: the weights are #ml_program.extern)."""
    from etc.compiler.program import EDGE_PIPELINE
    from etc.tools import import_model

    assert import_model.main(["small_cnn"]) == 0
    (tmp_path / "raw.mlir").write_text(capsys.readouterr().out)
    assert etc_opt.main([str(tmp_path / "raw.mlir"), "--etc-convert-aten-to-edge"]) == 1
    assert "etc.to_edge decomposes it" in capsys.readouterr().err
    assert import_model.main(["small_cnn", "--decompose"]) == 0
    (tmp_path / "decomposed.mlir").write_text(capsys.readouterr().out)
    out = tmp_path / "edge.mlir"
    assert etc_opt.main([str(tmp_path / "decomposed.mlir"), f"--pass-pipeline={EDGE_PIPELINE}", "-o", str(out)]) == 0
    assert "edge.convolution" in out.read_text() and "aten." not in out.read_text().replace("aten::", "")
    assert "batch norm not fused" in capsys.readouterr().err


def test_listed_gemm_tile_defaults_are_a_targets_row(capsys):
    """--list-passes showed kc=128 as the default, a value no target used (issue 24): the tile
    options' defaults are isa.py's AVX-512 row."""
    import re

    from etc.targets.cpu.isa import ISA_TABLE

    assert etc_opt.main(["--list-passes"]) == 0
    listing = capsys.readouterr().out
    row = ISA_TABLE["avx512"]
    want = {"lanes": row.lanes, "mr": row.gemm_mr, "nr": row.gemm_nr, "kc": row.gemm_kc, "kc-strided": row.gemm_kc_strided}
    for pass_name in ("etc-cpu-gemm-kernels", "etc-cpu-gemm-regions", "etc-cpu-tile-gemm-kernels"):
        section = listing.split(f"  {pass_name}\n", 1)[1].split("\n  etc-", 1)[0]
        for option, value in want.items():
            found = re.search(rf"^\s+{option}=<int>.*\(default: (\d+)\)$", section, flags=re.M)
            assert found and int(found.group(1)) == value, (pass_name, option, found and found.group(0))
