"""Passes that exist for tests of the pass infrastructure (as MLIR's `test-*` passes do)."""

from __future__ import annotations

from dataclasses import dataclass

from etc.passes.pass_api import Pass, option, register_pass


@register_pass
class EmitDiagnostics(Pass):
    """For every op carrying a string attribute `etc.test_diagnostic`, report its text:
    as a warning, or as an error (a failing pass) when the text starts with `error:`
    (`error: msg; note: more` adds notes).
    With `break-ir`, erase the terminator of the first function instead (invalid IR)."""

    name = "etc-test-diagnostics"
    summary = "Testing: report `etc.test_diagnostic` attributes as warnings/errors"

    @dataclass
    class Options:
        break_ir: bool = option(False, help="erase the first function's terminator to make the IR invalid")

    def run(self, op) -> None:
        from torch_mlir import ir

        if self.options.break_ir:
            def first_return(nested):
                if nested.name == "func.return":
                    nested.erase()
                    return ir.WalkResult.INTERRUPT
                return ir.WalkResult.ADVANCE

            op.walk(first_return)
            return
        found = []

        def collect(nested):
            if "etc.test_diagnostic" in nested.attributes:
                found.append(nested)
            return ir.WalkResult.ADVANCE

        op.walk(collect)
        for nested in found:
            text = ir.StringAttr(nested.attributes["etc.test_diagnostic"]).value
            if text.startswith("error:"):
                message, *notes = text[len("error:"):].split("; note:")
                raise self.error(message.strip(), at=nested, notes=[n.strip() for n in notes])
            self.warning(text, at=nested)
