"""Shared pytest set-up: the model zoo (test/models) is importable as `models`."""

import os
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

# torch.export warns about internals (pytree LeafSpec, LSTM flat weights) that are
# not the user's concern in these tests.
warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", message="The tensor attributes .* were assigned during export")
