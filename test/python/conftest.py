"""Shared pytest set-up (the model zoo is the package etc.models)."""

import warnings

import pytest

# torch.export warns about internals (pytree LeafSpec, LSTM flat weights) that are
# not the user's concern in these tests.
warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", message="The tensor attributes .* were assigned during export")


class KernelSwap:
    """`swap(name, fn)`: run `fn` as the kernel `name` (through the registry's public API,
    `register_kernel(..., replace=True)`); `undo()` puts the originals back (the fixture does after
    the test)."""

    def __init__(self):
        self.originals = {}

    def __call__(self, name: str, fn) -> None:
        from etc.runtime.kernels import registry

        if name not in self.originals:
            self.originals[name] = registry.get_kernel(name).__wrapped__ if registry.has_kernel(name) else None
        registry.register_kernel(name, fn, replace=True)

    def undo(self) -> None:
        from etc.runtime.kernels import registry

        for name, original in self.originals.items():
            registry.unregister_kernel(name)
            if original is not None:
                registry.register_kernel(name, original)
        self.originals = {}


@pytest.fixture
def swap_kernel():
    swap = KernelSwap()
    yield swap
    swap.undo()
