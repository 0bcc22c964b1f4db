// RUN: %PYTHON -m etc.tools.import_model mlp --constants | filecheck %s
// The zoo MLP: one func, parameters as extern globals, bytes in the side table.

// CHECK: ml_program.global private @layers.0.weight(#ml_program.extern : tensor<64x32xf32>) : tensor<64x32xf32>
// CHECK: ml_program.global private @layers.2.bias(#ml_program.extern : tensor<10xf32>)
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: %arg0: tensor<4x32xf32> {etc.dim_bounds = array<i64: 4, 4, 32, 32>}
// CHECK-SAME: -> tensor<4x10xf32>
// CHECK: %[[W:.+]] = ml_program.global_load_const @layers.0.weight : tensor<64x32xf32>
// CHECK: %[[B:.+]] = ml_program.global_load_const @layers.0.bias : tensor<64xf32>
// CHECK: "aten.linear"(%arg0, %[[W]], %[[B]]) {{.*}} -> tensor<4x64xf32> loc("linear"("{{.*}}zoo.py":77:13))
// CHECK: "aten.relu"({{.*}} loc("relu"("{{.*}}zoo.py":79:17))
// CHECK: return {{.*}} : tensor<4x10xf32>
// CHECK-NOT: dense
// CHECK: // constant layers.0.weight: float32 64x32 8192 bytes
