# lit configuration: every test runs the tools of this checkout's .venv.
import os
import sys

import lit.formats

config.name = "etc"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".py"]
config.excludes = ["lit.cfg.py", "Inputs"]
config.test_source_root = os.path.dirname(__file__)

_bin = os.path.dirname(sys.executable)
config.environment["PATH"] = _bin + os.pathsep + config.environment.get("PATH", os.environ.get("PATH", ""))
config.substitutions.append(("%PYTHON", sys.executable))
for var in ("HOME", "TMPDIR", "PYTHONPATH", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
