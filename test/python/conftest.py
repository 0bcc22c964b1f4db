"""Shared pytest set-up (the model zoo is the package etc.models)."""

import warnings

# torch.export warns about internals (pytree LeafSpec, LSTM flat weights) that are
# not the user's concern in these tests.
warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", message="The tensor attributes .* were assigned during export")
