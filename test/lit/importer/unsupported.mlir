// RUN: not %PYTHON -m etc.tools.import_model %S/Inputs/models.py:DynamicMap 2>&1 | filecheck %s --check-prefix=MAP
// RUN: not %PYTHON -m etc.tools.import_model %S/Inputs/models.py:WritesInput 2>&1 | filecheck %s --check-prefix=MUT
// RUN: not %PYTHON -m etc.tools.import_model no_such_model 2>&1 | filecheck %s --check-prefix=NAME
// Unsupported constructs are errors at the user's source line, not tracebacks.

// MAP: models.py:71:9: error: 'map_impl': map/scan needs inputs with one static leading size, the trip count (got [?, 3])
// MAP-NEXT: note: in method 'forward', FX node: %map_impl
// MAP-NOT: Traceback

// MUT: models.py:34:9: error: method 'forward' writes into its input 'x' in place

// NAME: error: unknown model 'no_such_model'
