"""`python -m etc.runtime.executorch_backend [--target T]`: build the backend and runner, print their paths."""

import sys

from etc.runtime.executorch_backend import main

sys.exit(main())
