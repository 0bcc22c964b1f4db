"""The pass-authoring API as a user meets it: the docstring's example runs as written, a user's
pass that raises is reported at the user's line (not as a bug in etc), plugins load once."""

from __future__ import annotations

import re
import sys
import textwrap
import types

import pytest

from etc.dialects import make_context
from etc.errors import InternalError, PassError, UserPassError
from etc.passes import pass_api
from etc.passes.pipeline import run_pipeline
from etc.passes.registry import load_pass_plugin
from etc.tools.etc_opt import parse_input

IR = """
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = "aten.alias"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %n = "aten.neg"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  return %n : tensor<4xf32>
}
"""


def _module():
    context = make_context()
    return parse_input(IR, "in.mlir", context), context


def _docstring_example() -> str:
    """The first indented code block of pass_api's docstring, verbatim."""
    doc = pass_api.__doc__
    block = re.search(r"\n\n((?:    .*\n|\n)+)", doc).group(1)
    return textwrap.dedent(block)


def test_docstring_example_runs_as_written(monkeypatch):
    example = types.ModuleType("user_example")
    monkeypatch.setitem(sys.modules, "user_example", example)
    exec(compile(_docstring_example(), "<pass_api docstring>", "exec"), example.__dict__)
    module, context = _module()
    with context:
        pipeline = run_pipeline(module, "builtin.module(func.func(etc-my-pass{verbose}))")
    text = str(module)
    assert "aten.alias" not in text and '"aten.neg"(%arg0)' in text
    assert pipeline.statistics() == [("etc-my-pass", {"forwarded": 1})]


def test_user_pass_exception_names_the_users_line(tmp_path):
    plugin = tmp_path / "my_passes.py"
    plugin.write_text(textwrap.dedent("""
        from etc.passes.pass_api import Pass, RewritePatternSet, register_pass

        @register_pass
        class Divide(Pass):
            name = "test-user-divide"
            summary = "divides by zero in run()"

            def run(self, op):
                return 1 / 0

        @register_pass
        class BadPattern(Pass):
            name = "test-user-bad-pattern"
            summary = "a pattern that raises"

            def patterns(self):
                patterns = RewritePatternSet()
                patterns.add("aten.neg", self.rewrite)
                return patterns

            def rewrite(self, op, rewriter):
                raise ValueError("no rewrite for " + op.name)
        """))
    assert load_pass_plugin(str(plugin)) is load_pass_plugin(str(plugin))  # imported once
    for name, line, kind in (("test-user-divide", 10, "ZeroDivisionError"),
                             ("test-user-bad-pattern", 23, "ValueError")):
        module, context = _module()
        with context, pytest.raises(UserPassError) as info:
            run_pipeline(module, f"builtin.module({name})")
        error = info.value
        assert not isinstance(error, InternalError)
        assert error.location == f"{plugin}:{line}", str(error)
        assert f"pass '{name}' raised {kind}" in error.message
        assert "bug in etc" not in str(error)


def test_plugin_that_fails_to_import_names_its_line(tmp_path):
    plugin = tmp_path / "broken.py"
    plugin.write_text("import os\n\nundefined_name + 1\n")
    with pytest.raises(PassError, match="failed to import: NameError") as info:
        load_pass_plugin(str(plugin))
    assert info.value.location == f"{plugin}:3"
    with pytest.raises(PassError, match="no such file"):
        load_pass_plugin(str(tmp_path / "absent.py"))
