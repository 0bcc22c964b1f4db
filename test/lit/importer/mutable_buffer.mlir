// RUN: %PYTHON -m etc.tools.import_model %S/Inputs/models.py:Counter | filecheck %s
// An in-place buffer update: a mutable global, loaded then stored back; sizes as index arithmetic.

// CHECK: ml_program.global private mutable @count(#ml_program.extern : tensor<4xf32>)
// CHECK-LABEL: func.func @forward(%arg0: tensor<?x4xf32> {etc.dim_bounds = array<i64: 1, 8, 4, 4>}
// CHECK: %[[COUNT:.+]] = ml_program.global_load @count : tensor<4xf32>
// CHECK: %[[DIM:.+]] = tensor.dim %arg0, %{{.+}} : tensor<?x4xf32> loc("sym_size_int{{.*}}"("{{.*}}models.py":20:9))
// CHECK: %[[NEW:.+]] = "aten.add_scalar"(%[[COUNT]]{{.*}} loc("add"("{{.*}}models.py":18:9))
// CHECK: arith.muli %[[DIM]], %{{.+}} : index loc("mul{{.*}}"("{{.*}}models.py":20:9))
// CHECK: ml_program.global_store @count = %[[NEW]] : tensor<4xf32>
// CHECK-NEXT: return
