"""`python -m etc.bench` (`make bench`): every section, written to BENCHMARKS.md (see etc.bench.report)."""

import sys

from etc.bench.report import main

sys.exit(main())
