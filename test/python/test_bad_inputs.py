"""Every bad input of the table (bad_inputs.py) raises the EtcError it lists, and BAD_INPUTS.md is
generated from those cases (issue 11: "a bad-input table in the docs, generated from the tests")."""

from __future__ import annotations

import os

import pytest

import bad_inputs
from etc import errors

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def _error_classes() -> dict[str, type]:
    """Every EtcError subclass by name (the CLI's UsageError included)."""
    import etc.tools.etc_main  # noqa: F401  (defines UsageError)

    found, todo = {}, [errors.EtcError]
    while todo:
        cls = todo.pop()
        found[cls.__name__] = cls
        todo += cls.__subclasses__()
    return found


@pytest.mark.parametrize("case", bad_inputs.CASES, ids=[f"{c[0]}: {c[1]}" for c in bad_inputs.CASES])
def test_bad_input_raises_its_error(case):
    _, _, action, expected = case
    with pytest.raises(_error_classes()[expected]) as info:
        action()
    assert type(info.value).__name__ == expected and str(info.value)


def test_the_table_in_the_docs_is_generated_from_the_cases():
    with open(os.path.join(ROOT, "BAD_INPUTS.md")) as f:
        assert f.read() == bad_inputs.render(), ("BAD_INPUTS.md is out of date: cd test/python && "
                                                 "../../.venv/bin/python bad_inputs.py > ../../BAD_INPUTS.md")
