"""etc-cpu-drop-assertions: remove torch-mlir's `cf.assert` shape and index checks.

With static shapes they hold by construction (the runtime checks every buffer's shape
before the call), and lowered they call puts/abort, which a self-contained object cannot.
"""

from __future__ import annotations

from etc.passes.pass_api import function_pass
from etc.targets.cpu.ir_query import walk


@function_pass("etc-cpu-drop-assertions", "Erase cf.assert (static shapes: they hold; lowered they would call abort)")
def drop_assertions(module, options=None) -> int:
    asserts = walk(module, ("cf.assert",))
    for op in asserts:
        op.erase()
    return len(asserts)
