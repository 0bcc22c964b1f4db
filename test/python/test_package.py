"""The package imports cheaply and exposes its error hierarchy."""

import etc
from etc import errors


def test_error_hierarchy_is_rooted_at_etc_error():
    for name in ("UnsupportedConstructError", "VerificationError", "PassError", "ProgramError",
                 "ExecutionError", "InputError", "KernelNotFoundError", "BackendError"):
        assert issubclass(getattr(errors, name), etc.EtcError)


def test_error_prints_location_like_a_diagnostic():
    err = errors.VerificationError("bad dtype", location="model.py:12:4")
    assert str(err) == "model.py:12:4: error: bad dtype"


def test_execution_error_names_what_is_involved():
    err = errors.ExecutionError("shape mismatch", method="forward", instruction=3, operator="aten::add.out")
    assert "method 'forward'" in str(err) and "instruction 3" in str(err) and "aten::add.out" in str(err)
