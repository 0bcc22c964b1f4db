// RUN: etc-opt %s --etc-fuse-batch-norm | filecheck %s
// Inference batch norm after a convolution becomes part of its weights:
// scale = gamma / sqrt(var + eps) = 4 / sqrt(0 + 4) = 2; W' = 3 * 2 = 6; b' = (b - mean) * 2 + beta = (1 - 2) * 2 + 5 = 3.

ml_program.global private @w(dense<3.0> : tensor<1x1x1x1xf32>) : tensor<1x1x1x1xf32>
ml_program.global private @b(dense<1.0> : tensor<1xf32>) : tensor<1xf32>
ml_program.global private @gamma(dense<4.0> : tensor<1xf32>) : tensor<1xf32>
ml_program.global private @beta(dense<5.0> : tensor<1xf32>) : tensor<1xf32>
ml_program.global private @mean(dense<2.0> : tensor<1xf32>) : tensor<1xf32>
ml_program.global private @var(dense<0.0> : tensor<1xf32>) : tensor<1xf32>

// CHECK-DAG: ml_program.global private @fused_bn_weight(dense<6.000000e+00> : tensor<1x1x1x1xf32>)
// CHECK-DAG: ml_program.global private @fused_bn_bias(dense<3.000000e+00> : tensor<1xf32>)
// CHECK-LABEL: func.func @forward
func.func @forward(%x: tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32> {
  %w = ml_program.global_load_const @w : tensor<1x1x1x1xf32>
  %b = ml_program.global_load_const @b : tensor<1xf32>
  %g = ml_program.global_load_const @gamma : tensor<1xf32>
  %be = ml_program.global_load_const @beta : tensor<1xf32>
  %m = ml_program.global_load_const @mean : tensor<1xf32>
  %v = ml_program.global_load_const @var : tensor<1xf32>
  %c = "edge.convolution"(%x, %w, %b) {dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0>, output_padding = array<i64: 0, 0>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>, transposed = false} : (tensor<1x1x4x4xf32>, tensor<1x1x1x1xf32>, tensor<1xf32>) -> tensor<1x1x4x4xf32>
  // CHECK-NOT: batch_norm
  // CHECK: "edge.convolution"(%arg0, %{{.+}}, %{{.+}})
  // CHECK-NOT: batch_norm
  %bn:3 = "edge.p_native_batch_norm_legit_no_training"(%c, %g, %be, %m, %v) {eps = 4.0 : f64, momentum = 0.1 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1>} : (tensor<1x1x4x4xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>) -> (tensor<1x1x4x4xf32>, tensor<0xf32>, tensor<0xf32>)
  return %bn#0 : tensor<1x1x4x4xf32>
}

// A dynamic batch: the fused convolution keeps the upper bound memory planning needs (found by
// the compiler fuzzer: "dimension 0 ... has no upper bound, so it cannot be planned").
// CHECK-LABEL: func.func @dynamic
// CHECK: "edge.convolution"(%arg0, %{{.+}}, %{{.+}}) {{.*}}etc.upper_bounds = array<i64: 8, 1, 4, 4>
func.func @dynamic(%x: tensor<?x1x4x4xf32> {etc.dim_bounds = array<i64: 1, 8, 1, 1, 4, 4, 4, 4>}) -> tensor<?x1x4x4xf32> {
  %w = ml_program.global_load_const @w : tensor<1x1x1x1xf32>
  %b = ml_program.global_load_const @b : tensor<1xf32>
  %g = ml_program.global_load_const @gamma : tensor<1xf32>
  %be = ml_program.global_load_const @beta : tensor<1xf32>
  %m = ml_program.global_load_const @mean : tensor<1xf32>
  %v = ml_program.global_load_const @var : tensor<1xf32>
  %c = "edge.convolution"(%x, %w, %b) {dilation = array<i64: 1, 1>, etc.upper_bounds = array<i64: 8, 1, 4, 4>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0>, output_padding = array<i64: 0, 0>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>, transposed = false} : (tensor<?x1x4x4xf32>, tensor<1x1x1x1xf32>, tensor<1xf32>) -> tensor<?x1x4x4xf32>
  %bn:3 = "edge.p_native_batch_norm_legit_no_training"(%c, %g, %be, %m, %v) {eps = 4.0 : f64, etc.upper_bounds = array<i64: 8, 1, 4, 4, 0, 0>, momentum = 0.1 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1>} : (tensor<?x1x4x4xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>) -> (tensor<?x1x4x4xf32>, tensor<0xf32>, tensor<0xf32>)
  return %bn#0 : tensor<?x1x4x4xf32>
}
