"""The pass-authoring API: options, registry, pipeline parsing and running."""

from __future__ import annotations

import enum
import io
import typing
from dataclasses import dataclass

import pytest
from torch_mlir import ir, rewrite

from etc.dialects import make_context
from etc.errors import EtcError, PassError, VerificationError
from etc.passes.pass_api import (Pass, collect_diagnostics, function_pass, format_options, option, options_help,
                                 parse_options, split_option_string)
from etc.passes.option_text import scan_value
from etc.passes.pipeline import NestedElement, PassElement, Pipeline, parse_pipeline, run_pipeline
from etc.passes.registry import all_passes, get_pass, register_pass


# ----------------------------------------------------------------- options
class Mode(enum.Enum):
    FAST = "fast"
    SMALL = "small"


@dataclass
class Opts:
    alignment: int = option(16, help="bytes")
    ratio: float = option(0.5, help="a ratio")
    verbose: bool = option(False, help="talk")
    algorithm: str = option("greedy", help="how", choices=("greedy", "naive"))
    mode: Mode = option(Mode.FAST, help="a mode")
    level: typing.Literal["low", "high"] = option("low", help="a literal")
    dims: list[int] = option(list, help="some dims")
    names: list[str] = option(lambda: ["a"], help="some names")
    sizes: list[float] = option([1.0, 2.0], help="copied per instance")


def test_options_defaults_and_parsing():
    assert parse_options(Opts, None, "p") == Opts()
    opts = parse_options(Opts, "{alignment=64 ratio=0.25 verbose algorithm=naive mode=small level=high "
                               "dims=0,-1,2 names={x,y}}", "p")
    assert opts == Opts(64, 0.25, True, "naive", Mode.SMALL, "high", [0, -1, 2], ["x", "y"])
    assert Opts().sizes == [1.0, 2.0] and Opts().sizes is not Opts().sizes
    assert parse_options(Opts, "verbose=false alignment=0x10", "p") == Opts(alignment=16)
    assert parse_options(Opts, {"ratio": "2"}, "p").ratio == 2.0


def test_options_accept_underscores_and_quotes():
    assert split_option_string('{a=1 b="x y" c={1,2} d}') == [("a", "1"), ("b", "x y"), ("c", "{1,2}"), ("d", None)]
    assert parse_options(Opts, "names='p q'", "p").names == ["p q"]


@pytest.mark.parametrize("text, message", [
    ("alignmnt=3", "unknown option 'alignmnt' of p; valid options: alignment, ratio, verbose, algorithm, mode, "
                   "level, dims, names, sizes"),
    ("alignment=wide", "option 'alignment' of p expects an integer, got 'wide'"),
    ("ratio=x", "option 'ratio' of p expects a number"),
    ("verbose=maybe", "option 'verbose' of p expects true or false, got 'maybe'"),
    ("algorithm=best", "option 'algorithm' of p expects one of greedy, naive, got 'best'"),
    ("mode=slow", "option 'mode' of p expects one of FAST, SMALL"),
    ("level=mid", "expects one of low, high"),
    ("dims=1,x", "option 'dims' of p expects an integer, got 'x'"),
    ("alignment", "option 'alignment' of p needs a value (int)"),
    ("names={a", "unbalanced braces"),
])
def test_bad_options_are_pass_errors(text, message):
    with pytest.raises(PassError, match=None) as info:
        parse_options(Opts, text, "p")
    assert message in str(info.value)


def test_format_options_round_trips():
    opts = Opts(alignment=8, dims=[1, 2], names=["a b"], mode=Mode.SMALL)
    assert parse_options(Opts, format_options(opts), "p") == opts
    rows = {name: (kind, text) for name, kind, text in options_help(Opts)}
    assert rows["alignment"] == ("int", "bytes (default: 16)")
    assert rows["algorithm"][0] == "greedy|naive"
    assert rows["dims"][0] == "list of int"


def test_option_needs_a_default():
    with pytest.raises(TypeError):
        option(help="no default")


# ---------------------------------------------------------------- registry
def test_registry_has_etc_passes():
    passes = all_passes()
    for name in ("etc-dce", "etc-canonicalize-aten", "etc-convert-aten-to-edge", "etc-memory-planning"):
        assert name in passes and passes[name].summary
    assert get_pass("etc-dce").name == "etc-dce"
    planning = get_pass("etc-memory-planning")("alignment=64 algorithm=naive")
    assert (planning.options.alignment, planning.options.algorithm) == (64, "naive")
    assert str(planning).startswith("etc-memory-planning{algorithm=naive alignment=64")


def test_index_read_from_the_sources_is_what_the_modules_register():
    import sys

    from etc.passes.registry import PASS_PACKAGES, builtin_index

    # every pass a real module of the pass packages registers (tests here also register classes that
    # only claim a module name)
    registered = {name: cls.__module__ for name, cls in all_passes().items()
                  if cls.__module__ in sys.modules and cls.__module__.rpartition(".")[0] in PASS_PACKAGES}
    assert builtin_index() == registered


def test_looking_up_one_pass_imports_only_its_module():
    import subprocess
    import sys

    code = ("import sys; from etc.passes.registry import lookup_pass, pass_names;"
            "assert 'etc-cpu-row-kernels' in pass_names(); lookup_pass('etc-dce');"
            "print(sorted(m for m in sys.modules if '.passes.' in m and 'registry' not in m))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "etc.passes.dce" in loaded and "row_kernels" not in loaded and "etc.targets" not in loaded


def test_unknown_pass_names_close_ones():
    with pytest.raises(PassError, match="unknown pass 'etc-dcx'; did you mean 'etc-dce'"):
        get_pass("etc-dcx")


def test_register_pass_checks_name_and_duplicates():
    with pytest.raises(TypeError, match="needs a `name`"):
        register_pass(type("Nameless", (Pass,), {"summary": "x"}))
    with pytest.raises(TypeError, match="one-line `summary`"):
        register_pass(type("NoSummary", (Pass,), {"name": "etc-test-nosummary"}))
    with pytest.raises(PassError, match="registered twice"):
        register_pass(type("OtherDce", (Pass,), {"name": "etc-dce", "summary": "again"}))


# -------------------------------------------------------- pipeline syntax
def test_parse_pipeline_nesting_and_options():
    root = parse_pipeline("builtin.module(func.func(etc-a, canonicalize), etc-b{opt=1 x={2,3}}, cse)")
    assert root.anchor == "builtin.module"
    nested, b, cse = root.elements
    assert isinstance(nested, NestedElement) and nested.anchor == "func.func"
    assert [e.name for e in nested.elements] == ["etc-a", "canonicalize"]
    assert b == PassElement("etc-b", "opt=1 x={2,3}", 48)
    assert cse.name == "cse" and cse.options is None
    assert root.text() == "builtin.module(func.func(etc-a, canonicalize), etc-b{opt=1 x={2,3}}, cse)"


def test_parse_pipeline_implicit_module():
    root = parse_pipeline(" etc-dce , func.func(cse) ")
    assert root.anchor == "builtin.module" and [type(e) for e in root.elements] == [PassElement, NestedElement]
    assert parse_pipeline("").elements == []
    assert parse_pipeline("builtin.module(func.func())").elements[0].elements == []


def test_pipeline_and_option_readers_agree_on_quotes_and_braces():
    """One scanner serves both: a `}` inside quotes or nested braces does not end the block."""
    root = parse_pipeline('etc-b{s="a}b" x={1,{2}} flag}, cse')
    block = root.elements[0].options
    assert block == 's="a}b" x={1,{2}} flag' and root.elements[1].name == "cse"
    assert split_option_string(block) == [("s", "a}b"), ("x", "{1,{2}}"), ("flag", None)]
    assert scan_value("a={1,2}} b", 0, "}") == (7, None, 0)
    assert scan_value('x="{', 0, " ") == (4, '"', 0)


@pytest.mark.parametrize("text, where, message", [
    ("builtin.module(func.func(cse)", ":1:30", "expected ')' to close '(' at column 15"),
    ("builtin.module(cse))", ":1:20", "expected ',' or the end of the pipeline, found ')'"),
    ("builtin.module(cse,)", ":1:20", "expected a pass or op name, found ')'"),
    ("builtin.module(,cse)", ":1:16", "expected a pass or op name, found ','"),
    ("builtin.module(cse etc)", ":1:20", "expected ',' or ')', found 'e'"),
    ("builtin.module(etc-a{x=1)", ":1:21", "unbalanced '{' in the options of 'etc-a'"),
    ("cse, builtin.module(cse)", ":1:1", "must be the whole pipeline"),
])
def test_parse_pipeline_errors(text, where, message):
    with pytest.raises(PassError) as info:
        parse_pipeline(text)
    assert info.value.location == "<pass-pipeline>" + where
    assert message in info.value.message


# --------------------------------------------------------- running passes
SOURCE = """
func.func @f(%x: tensor<4xf32>, %i: i32) -> (tensor<4xf32>, i32) {
  %dead = "aten.neg"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %zero = arith.constant 0 : i32
  %j = arith.addi %i, %zero : i32
  %0 = "aten.relu"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "aten.relu"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = "aten.add_tensor"(%0, %1) {alpha = 1 : i64} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %2, %j : tensor<4xf32>, i32
}
"""


@pytest.fixture()
def module():
    context = make_context()
    with context, ir.Location.unknown():
        yield ir.Module.parse(SOURCE)


def test_run_pipeline_mixes_python_and_upstream(module):
    stream = io.StringIO()
    pipeline = run_pipeline(module, "builtin.module(etc-dce, canonicalize, func.func(cse))",
                            print_ir_after_all=True, print_stream=stream)
    text = str(module)
    assert "aten.neg" not in text and "arith.addi" not in text and text.count("aten.relu") == 1
    dumps = [line for line in stream.getvalue().splitlines() if "IR Dump After" in line]
    assert dumps == ["// -----// IR Dump After etc-dce //----- //",
                     "// -----// IR Dump After canonicalize //----- //",
                     "// -----// IR Dump After cse ('func.func' operation) //----- //"]
    assert pipeline.steps[0].python_pass.statistics == {"erased": 1}


def test_unknown_pass_in_pipeline(module):
    with pytest.raises(EtcError, match="'etc-dcee' does not refer to a registered pass; did you mean 'etc-dce'"):
        run_pipeline(module, "builtin.module(func.func(etc-dcee))")


def test_bad_upstream_option(module):
    with pytest.raises(PassError, match="invalid upstream pass 'cse{foo=1}'"):
        run_pipeline(module, "builtin.module(cse{foo=1})")


def test_pipeline_anchor_must_match(module):
    with pytest.raises(PassError, match="anchored on 'builtin.module' cannot run on a 'func.func'"):
        Pipeline("builtin.module(cse)", context=module.context).run(module.body.operations[0])


@register_pass
class _BreakIR(Pass):
    name = "etc-test-python-break"
    summary = "test: erase every return"

    def run(self, op):
        returns = []
        op.walk(lambda o: (returns.append(o) if o.name == "func.return" else None) or ir.WalkResult.ADVANCE)
        for r in returns:
            r.erase()


def test_verifier_names_the_pass(module):
    with pytest.raises(VerificationError, match="invalid after pass 'etc-test-python-break'"):
        run_pipeline(module, "func.func(etc-test-python-break)")


def test_verify_false_skips_the_verifier():
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(SOURCE)
        run_pipeline(module, "etc-test-python-break", verify=False)
        assert "return" not in str(module.operation.get_asm(assume_verified=True))


@register_pass
class _RenameRelu(Pass):
    """A pattern-based test pass: relu -> sigmoid, counting rewrites."""

    name = "etc-test-relu-to-sigmoid"
    summary = "test: rewrite aten.relu into aten.sigmoid"

    @dataclass
    class Options:
        limit: int = option(-1, help="stop after this many rewrites (-1: no limit)")

    def patterns(self):
        patterns = rewrite.RewritePatternSet()

        def relu(op, rewriter):
            if self.options.limit >= 0 and self.statistics.get("rewritten", 0) >= self.options.limit:
                return True
            with rewriter.ip:
                new = ir.Operation.create("aten.sigmoid", results=[op.result.type], operands=[op.operands[0]],
                                          loc=op.location)
            rewriter.replace_op(op, new)
            self.count("rewritten")
            return None

        patterns.add("aten.relu", relu)
        return patterns


def test_pattern_pass_and_options(module):
    pipeline = run_pipeline(module, "builtin.module(func.func(etc-test-relu-to-sigmoid{limit=1}))")
    text = str(module)
    assert text.count("aten.sigmoid") == 1 and text.count("aten.relu") == 1
    assert pipeline.steps[0].python_pass.statistics == {"rewritten": 1}


def test_pass_errors_and_warnings_are_located():
    source = 'func.func @f(%x: i32) -> i32 {\n  %0 = arith.addi %x, %x {etc.test_diagnostic = "careful"} : i32\n' \
             '  return %0 : i32\n}\n'
    with make_context():
        module = ir.Module.parse(source)
        with collect_diagnostics() as diagnostics:
            run_pipeline(module, "etc-test-diagnostics")
        assert [(d.severity, d.message) for d in diagnostics] == [("warning", "careful")]
        assert diagnostics[0].location.endswith(":2:8")
        module = ir.Module.parse(source.replace('"careful"', '"error: wrong"'))
        with pytest.raises(PassError, match="wrong") as info:
            run_pipeline(module, "etc-test-diagnostics")
        assert info.value.location.endswith(":2:8")


def test_a_pass_with_neither_run_nor_patterns_is_a_pass_error_saying_what_to_override(module):
    class Empty(Pass):
        name = "etc-test-empty"
        summary = "overrides neither run nor patterns"

    with module.context, pytest.raises(PassError, match="defines neither run") as info:
        Empty().run(module.operation)
    assert "override run(self, op)" in str(info.value)


def test_memory_planning_pass_matches_the_function(module):
    with module.context:
        run_pipeline(module, "builtin.module(etc-dce, etc-memory-planning{alignment=64})")
    assert "etc.buffer_sizes" in str(module)


def test_a_pass_instance_runs_in_an_upstream_pass_manager():
    from torch_mlir import passmanager

    with make_context() as context, ir.Location.unknown():
        context.enable_multithreading(False)
        module = ir.Module.parse(SOURCE)
        dce = get_pass("etc-dce")()
        pm = passmanager.PassManager()
        pm.add(dce, dce.name)
        pm.add("cse")
        pm.run(module.operation)
        assert dce.statistics == {"erased": 1} and "aten.neg" not in str(module)
        assert "walking each block backwards" in type(dce).description()


@dataclass
class _CountOptions:
    name: str = option("aten.relu", help="op name to count")


@function_pass("etc-test-count-ops", "test: count ops of one name", _CountOptions)
def _count_ops(op, options):
    """Counts the ops named `options.name`."""
    found = []
    op.walk(lambda o: (found.append(o) if o.name == options.name else None) or ir.WalkResult.ADVANCE)
    return len(found)


def test_function_pass(module):
    assert get_pass("etc-test-count-ops") is _count_ops.pass_class
    pipeline = run_pipeline(module, "etc-test-count-ops{name=aten.relu}")
    assert pipeline.steps[0].python_pass.statistics == {"changed": 2}
    assert _count_ops.pass_class.description() == "Counts the ops named `options.name`."


def test_failing_upstream_pass_is_named():
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse('func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n'
                                 '  %0 = "aten.relu"(%x) : (tensor<4xf32>) -> tensor<4xf32>\n'
                                 '  return %0 : tensor<4xf32>\n}\n')
        with pytest.raises(PassError, match=r"op was not bufferized \(pass 'one-shot-bufferize' failed\)"):
            run_pipeline(module, "builtin.module(canonicalize, one-shot-bufferize, cse)")


def test_pipeline_text_spells_out_options(module):
    pipeline = Pipeline("func.func(etc-memory-planning{alignment=8}), cse", context=module.context)
    assert str(pipeline) == ("builtin.module(func.func(etc-memory-planning{algorithm=greedy alignment=8 "
                             "alloc-graph-input=false alloc-graph-output=true report=false}), cse)")
    assert str(Pipeline(str(pipeline), context=module.context)) == str(pipeline)


def test_invalid_input_is_not_blamed_on_a_pass():
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(SOURCE)
        run_pipeline(module, "etc-test-python-break", verify=False)
        with pytest.raises(VerificationError, match="invalid before the pipeline runs"):
            run_pipeline(module, "etc-dce")


@register_pass
class _Crash(Pass):
    """Stands for one of etc's own passes (its module is etc's): its bug is etc's. A pass defined
    outside etc is the user's (test_pass_plugins.py)."""
    __module__ = "etc.passes.crash_for_test"
    name = "etc-test-crash"
    summary = "test: a pass with a bug"

    def run(self, op):
        return {}["missing"]


def test_a_crashing_pass_is_named_as_an_internal_error(module):
    from etc.errors import InternalError

    with pytest.raises(InternalError, match=r"pass 'etc-test-crash' crashed: KeyError: 'missing'") as info:
        run_pipeline(module, "builtin.module(cse, etc-test-crash)")
    assert isinstance(info.value, PassError) and isinstance(info.value.__cause__, KeyError)
    assert any("bug in etc" in note for note in info.value.notes)
