// RUN: etc-opt %s --etc-fuse-batch-norm --verify-diagnostics | filecheck %s
// A printed program (tools/import_model.py) keeps its weights outside the IR: the globals are
// #ml_program.extern, so the pass has nothing to fold. It says so instead of doing nothing
// silently, and leaves the pair as it is.

ml_program.global private @w(#ml_program.extern : tensor<1x1x1x1xf32>) : tensor<1x1x1x1xf32>
ml_program.global private @gamma(#ml_program.extern : tensor<1xf32>) : tensor<1xf32>
ml_program.global private @beta(#ml_program.extern : tensor<1xf32>) : tensor<1xf32>
ml_program.global private @mean(#ml_program.extern : tensor<1xf32>) : tensor<1xf32>
ml_program.global private @var(#ml_program.extern : tensor<1xf32>) : tensor<1xf32>

// CHECK-LABEL: func.func @forward
// CHECK: "edge.convolution"
// CHECK: "edge.p_native_batch_norm_legit_no_training"
func.func @forward(%x: tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32> {
  %w = ml_program.global_load_const @w : tensor<1x1x1x1xf32>
  %g = ml_program.global_load_const @gamma : tensor<1xf32>
  %be = ml_program.global_load_const @beta : tensor<1xf32>
  %m = ml_program.global_load_const @mean : tensor<1xf32>
  %v = ml_program.global_load_const @var : tensor<1xf32>
  %c = "edge.convolution"(%x, %w) {dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>, output_padding = array<i64: 0, 0>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>, transposed = false} : (tensor<1x1x4x4xf32>, tensor<1x1x1x1xf32>) -> tensor<1x1x4x4xf32>
  // expected-warning @+1 {{batch norm not fused into the convolution before it: their weights are #ml_program.extern globals whose data is not in this IR}}
  %bn:3 = "edge.p_native_batch_norm_legit_no_training"(%c, %g, %be, %m, %v) {eps = 1.0e-05 : f64, momentum = 0.1 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1>} : (tensor<1x1x4x4xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>) -> (tensor<1x1x4x4xf32>, tensor<0xf32>, tensor<0xf32>)
  return %bn#0 : tensor<1x1x4x4xf32>
}
