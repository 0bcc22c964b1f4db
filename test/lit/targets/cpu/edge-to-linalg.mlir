// The front of the cpu pipeline (pipeline.EDGE_TO_LINALG): after torch-mlir's pipelines, builtin
// tensors in linalg/tensor/arith/math with the entry's arguments labelled, what the tuned passes
// start from; then the first of them.
// RUN: etc-opt %s --pass-pipeline='builtin.module(etc-cpu-edge-to-torch, etc-cpu-lower-quantized, etc-cpu-expand-torch-ops, symbol-dce, torchdynamo-export-to-torch-backend-pipeline, torch-backend-to-linalg-on-tensors-backend-pipeline)' | filecheck %s
// RUN: etc-opt %s --pass-pipeline='builtin.module(etc-cpu-edge-to-torch, etc-cpu-lower-quantized, etc-cpu-expand-torch-ops, symbol-dce, torchdynamo-export-to-torch-backend-pipeline, torch-backend-to-linalg-on-tensors-backend-pipeline, etc-cpu-gemm-kernels{lanes=1}, etc-cpu-default-loops)' | filecheck %s --check-prefix=LOOPS

ml_program.global private @w(#ml_program.extern : tensor<8x3x3x3xf32>) : tensor<8x3x3x3xf32>

// CHECK-LABEL: func.func @delegate_cpu_0
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<1x3x10x10xf32> {bufferization.writable = false, etc.cpu.arg = "input:0"},
// CHECK-SAME: %[[W:[a-z0-9]+]]: tensor<8x3x3x3xf32> {bufferization.writable = false, etc.cpu.arg = "constant:w"}) -> tensor<1x8x8x8xf32>
// CHECK: linalg.conv_2d_nchw_fchw
// CHECK-SAME: ins(%[[X]], %[[W]] : tensor<1x3x10x10xf32>, tensor<8x3x3x3xf32>)
// CHECK: linalg.generic
// CHECK: arith.cmpf ugt
// CHECK-NOT: torch.
// Into the cpu pipeline (without a vector unit): the convolution stays loops, a recorded
// decision; the default loop order moves its reductions (c, kh, kw) outside the output-column
// loop, which becomes the innermost, unit-stride one.
// LOOPS: module attributes {etc.cpu.decisions = [{kind = "convolution", op = "linalg.conv_2d_nchw_fchw", path = "loops", reason = "the target has no vector unit the GEMM kernel is written for"
// LOOPS: linalg.generic {indexing_maps = [#{{.*}}, #{{.*}}, #{{.*}}], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction", "reduction", "parallel"]} ins(%{{.*}}, %{{.*}} : tensor<1x3x10x10xf32>, tensor<8x3x3x3xf32>)
// LOOPS-NEXT: ^bb0
// LOOPS-NEXT: arith.mulf
// LOOPS-NEXT: arith.addf
// LOOPS: arith.cmpf ugt
// LOOPS: return
func.func @delegate_cpu_0(%x: tensor<1x3x10x10xf32>) -> tensor<1x8x8x8xf32> {
  %w = ml_program.global_load_const @w : tensor<8x3x3x3xf32>
  %c = "edge.convolution"(%x, %w) {dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>, output_padding = array<i64: 0, 0>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>, transposed = false} : (tensor<1x3x10x10xf32>, tensor<8x3x3x3xf32>) -> tensor<1x8x8x8xf32>
  %r = "edge.relu"(%c) : (tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
  return %r : tensor<1x8x8x8xf32>
}
