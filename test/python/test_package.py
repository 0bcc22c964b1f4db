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


def test_the_wheel_holds_every_package_and_data_file(tmp_path):
    """`pip wheel .` once left etc.targets.cpu.passes out (a hand-written package list), and an
    installed wheel failed at to_backend(CpuPartitioner()); the editable install hid it. Every
    folder with Python modules and every file the package reads must be in the wheel."""
    import os
    import subprocess
    import sys
    import zipfile

    root = os.path.dirname(etc.__file__)
    subprocess.run([sys.executable, "-m", "pip", "wheel", root, "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path)], check=True, capture_output=True)
    (wheel,) = tmp_path.glob("etc-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = set()
    for folder, dirs, files in os.walk(root):
        rel = os.path.relpath(folder, root)
        dirs[:] = [d for d in dirs if not d.startswith((".", "__")) and d not in ("test", "build")
                   and not d.endswith(".egg-info")]
        for f in files:
            if f.endswith((".py", ".json", ".fbs")) and f != "setup.py" or rel.endswith("firmware") and \
                    f.endswith((".c", ".h", ".ld")):
                expected.add(os.path.normpath(os.path.join("etc", rel, f)).replace(os.sep, "/"))
    missing = sorted(expected - names)
    assert not missing, f"not in the wheel: {missing}"
