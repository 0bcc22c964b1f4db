// RUN: etc-opt %s --etc-cpu-gemm-kernels --etc-cpu-tile-gemm-kernels | filecheck %s

// The kernel is inlined and tiled: column panels (the loop threads share), 6-row blocks (the
// partial block of 4 rows peeled), one k step per iteration with the 6x64 accumulator carried
// in registers as six 64-wide vector FMAs.
// CHECK-LABEL: func.func @mm
// CHECK-NOT: call @etc_gemm
// CHECK: scf.for
// CHECK: scf.for {{.*}} iter_args(%{{.*}} = %{{.*}}) -> (vector<6x64xf32>)
// CHECK-COUNT-6: vector.fma {{.*}} : vector<64xf32>
// CHECK: } {etc.thread_split}
// CHECK-NOT: func.func private
func.func @mm(%a: tensor<64x96xf32>, %b: tensor<96x128xf32>) -> tensor<64x128xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x128xf32>
  %c = linalg.fill ins(%z : f32) outs(%e : tensor<64x128xf32>) -> tensor<64x128xf32>
  %r = linalg.matmul ins(%a, %b : tensor<64x96xf32>, tensor<96x128xf32>) outs(%c : tensor<64x128xf32>) -> tensor<64x128xf32>
  return %r : tensor<64x128xf32>
}
