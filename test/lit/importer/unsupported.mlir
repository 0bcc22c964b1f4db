// RUN: not %PYTHON -m etc.tools.import_model %S/Inputs/models.py:WithCond 2>&1 | filecheck %s --check-prefix=COND
// RUN: not %PYTHON -m etc.tools.import_model %S/Inputs/models.py:WritesInput 2>&1 | filecheck %s --check-prefix=MUT
// RUN: not %PYTHON -m etc.tools.import_model no_such_model 2>&1 | filecheck %s --check-prefix=NAME
// Unsupported constructs are errors at the user's source line, not tracebacks.

// COND: models.py:27:9: error: torch.ops.higher_order.cond is not supported
// COND-NEXT: note: in method 'forward', FX node: %cond
// COND-NOT: Traceback

// MUT: models.py:34:9: error: method 'forward' writes into its input 'x' in place

// NAME: error: unknown model 'no_such_model'
