// etc-opt parses and prints our dialects and the upstream ones; printing is a fixed point.
// RUN: etc-opt %s | filecheck %s
// RUN: etc-opt %s | etc-opt - | filecheck %s
// RUN: etc-opt < %s | filecheck %s
// RUN: etc-opt %s --mlir-print-debuginfo | filecheck %s --check-prefix=LOC
// RUN: etc-opt %s -o %t.mlir && etc-opt %t.mlir | filecheck %s

// CHECK: ml_program.global private @weight(dense<1.000000e+00> : tensor<4x8xf32>)
ml_program.global private @weight(dense<1.0> : tensor<4x8xf32>) : tensor<4x8xf32>

// CHECK-LABEL: func.func @forward(%arg0: tensor<4x8xf32> {etc.dim_bounds = array<i64: 4, 4, 8, 8>})
func.func @forward(%x: tensor<4x8xf32> {etc.dim_bounds = array<i64: 4, 4, 8, 8>}) -> tensor<32xf32> {
  // CHECK: %[[W:.+]] = ml_program.global_load_const @weight
  %w = ml_program.global_load_const @weight : tensor<4x8xf32>
  // CHECK: %[[A:.+]] = "aten.add_tensor"(%arg0, %[[W]]) {alpha = 1 : i64}
  %0 = "aten.add_tensor"(%x, %w) {alpha = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> loc(#relu)
  // CHECK: %[[V:.+]] = "edge.view"(%[[A]]) {size = array<i64: 32>}
  %1 = "edge.view"(%0) {size = array<i64: 32>} : (tensor<4x8xf32>) -> tensor<32xf32> loc("model.py":12:5)
  // CHECK: return %[[V]] : tensor<32xf32>
  return %1 : tensor<32xf32>
}
#relu = loc("add_1"("model.py":11:9))
// LOC: "aten.add_tensor"{{.*}} loc(#[[ADD:loc[0-9]*]])
// LOC: "edge.view"{{.*}} loc(#[[VIEW:loc[0-9]*]])
// LOC-DAG: #[[ADD]] = loc("add_1"(#{{loc[0-9]*}}))
// LOC-DAG: #[[VIEW]] = loc("model.py":12:5)
