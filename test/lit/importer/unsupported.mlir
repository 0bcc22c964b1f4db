// RUN: not %PYTHON -m etc.tools.import_model %S/Inputs/models.py:WithMap 2>&1 | filecheck %s --check-prefix=MAP
// RUN: not %PYTHON -m etc.tools.import_model %S/Inputs/models.py:WritesInput 2>&1 | filecheck %s --check-prefix=MUT
// RUN: not %PYTHON -m etc.tools.import_model no_such_model 2>&1 | filecheck %s --check-prefix=NAME
// Unsupported constructs are errors at the user's source line, not tracebacks.

// MAP: models.py:44:9: error: torch.ops.higher_order.map_impl is not supported: etc imports torch.cond and torch.while_loop
// MAP-NEXT: note: in method 'forward', FX node: %map_impl
// MAP-NOT: Traceback

// MUT: models.py:34:9: error: method 'forward' writes into its input 'x' in place

// NAME: error: unknown model 'no_such_model'
