// RUN: etc-opt %s --etc-fold-constants | filecheck %s
// Ops whose inputs are all constants are evaluated at compile time; weights
// written inline (dense globals) become new globals, the unused ones go away.

// CHECK-NOT: @w(
// CHECK: ml_program.global private @folded(dense<{{\[}}[1.000000e+00, 3.000000e+00, 5.000000e+00], [2.000000e+00, 4.000000e+00, 6.000000e+00]]> : tensor<2x3xf32>)
ml_program.global private @w(dense<[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]> : tensor<3x2xf32>) : tensor<3x2xf32>

// CHECK-LABEL: func.func @forward
func.func @forward(%x: tensor<4x2xf32>) -> tensor<4x3xf32> {
  // CHECK-NOT: edge.permute
  // CHECK: %[[W:.+]] = ml_program.global_load_const @folded : tensor<2x3xf32>
  // CHECK: "edge.mm"(%arg0, %[[W]])
  %w = ml_program.global_load_const @w : tensor<3x2xf32>
  %t = "edge.permute"(%w) {dims = array<i64: 1, 0>} : (tensor<3x2xf32>) -> tensor<2x3xf32>
  %y = "edge.mm"(%x, %t) : (tensor<4x2xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  return %y : tensor<4x3xf32>
}

// An op reading a function argument is not constant.
// CHECK-LABEL: func.func @not_constant
func.func @not_constant(%x: tensor<3x2xf32>) -> tensor<2x3xf32> {
  // CHECK: "edge.permute"(%arg0)
  %t = "edge.permute"(%x) {dims = array<i64: 1, 0>} : (tensor<3x2xf32>) -> tensor<2x3xf32>
  return %t : tensor<2x3xf32>
}
