// After torch-mlir's pipelines: builtin tensors in linalg/tensor/arith/math, then
// fused and bufferized onto the entry's buffers (inputs, constants, outputs, scratch).
// RUN: %PYTHON -m etc.targets.cpu.lower %s --stage linalg | filecheck %s
// RUN: %PYTHON -m etc.targets.cpu.lower %s --stage memref | filecheck %s --check-prefix=MEMREF

ml_program.global private @w(#ml_program.extern : tensor<8x3x3x3xf32>) : tensor<8x3x3x3xf32>

// CHECK-LABEL: func.func @delegate_cpu_0
// CHECK-SAME: (%[[X:.*]]: tensor<1x3x10x10xf32>, %[[W:.*]]: tensor<8x3x3x3xf32>) -> tensor<1x8x8x8xf32>
// CHECK: linalg.conv_2d_nchw_fchw
// CHECK-SAME: ins(%[[X]], %[[W]] : tensor<1x3x10x10xf32>, tensor<8x3x3x3xf32>)
// CHECK: linalg.generic
// CHECK: arith.cmpf ugt
// CHECK-NOT: torch.
// MEMREF: // scratch bytes: 0, buffers at []
// MEMREF-LABEL: func.func @delegate_cpu_0
// MEMREF-SAME: (%{{.*}}: memref<1x3x10x10xf32>, %{{.*}}: memref<8x3x3x3xf32>, %[[OUT:.*]]: memref<1x8x8x8xf32>)
// MEMREF-NOT: memref.alloc
// The default strategy generalizes the convolution and moves its reductions (c, kh, kw)
// outside the output-column loop, which becomes the innermost, unit-stride one.
// MEMREF: linalg.generic {{.*}} outs(%[[OUT]] : memref<1x8x8x8xf32>)
// MEMREF: linalg.generic {indexing_maps = [#{{.*}}, #{{.*}}, #{{.*}}], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction", "reduction", "parallel"]} ins(%{{.*}}, %{{.*}} : memref<1x3x10x10xf32>, memref<8x3x3x3xf32>) outs(%[[OUT]] : memref<1x8x8x8xf32>)
// MEMREF-NEXT: ^bb0
// MEMREF-NEXT: arith.mulf
// MEMREF-NEXT: arith.addf
// MEMREF: linalg.generic {{.*}} outs(%[[OUT]] : memref<1x8x8x8xf32>)
// MEMREF: arith.cmpf ugt
// MEMREF: return
func.func private @delegate_cpu_0(%x: tensor<1x3x10x10xf32>) -> tensor<1x8x8x8xf32> {
  %w = ml_program.global_load_const @w : tensor<8x3x3x3xf32>
  %c = "edge.convolution"(%x, %w) {dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>, output_padding = array<i64: 0, 0>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>, transposed = false} : (tensor<1x3x10x10xf32>, tensor<8x3x3x3xf32>) -> tensor<1x8x8x8xf32>
  %r = "edge.relu"(%c) : (tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
  return %r : tensor<1x8x8x8xf32>
}
