// RUN: etc-opt %s --pass-pipeline='builtin.module(etc-cpu-gemm-kernels{kc=128 l2-kib=64}, etc-cpu-fuse-elementwise, etc-cpu-gemm-regions{kc=128 l2-kib=64}, etc-cpu-tile-gemm-kernels{kc=128 l2-kib=64})' | filecheck %s

// An A at least as large as the L2 (here 64 KiB: 1260 x 16 f32 = 80 KB) is cut into row blocks
// of about a quarter of it (gemm.row_block: five of 252 rows), the loop over them outside the
// column panels (which the threads share), so each block stays in L2 while every panel passes
// over it; inside, the rows in mr = 6 tiles with the bias and ReLU in registers.
// CHECK-LABEL: func.func @rows_in_blocks
// CHECK: scf.for %[[I:.*]] = %c0 to %c1260 step %c252
// CHECK: scf.for %[[J:.*]] = %c0 to %c128 step %c64
// CHECK: scf.for %{{.*}} = %c0 to %c252 step %c6
// CHECK: scf.for {{.*}} iter_args(%{{.*}} = %{{.*}}) -> (vector<6x64xf32>)
// CHECK-COUNT-6: vector.fma {{.*}} : vector<64xf32>
// CHECK: arith.maximumf {{.*}} : vector<6x64xf32>
// CHECK: } {etc.thread_split}
// CHECK-NOT: linalg.generic {
#mn = affine_map<(m, n) -> (m, n)>
#n = affine_map<(m, n) -> (n)>
func.func @rows_in_blocks(%a: tensor<1260x16xf32>, %b: tensor<16x128xf32>, %bias: tensor<128xf32>) -> tensor<1260x128xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1260x128xf32>
  %c = linalg.broadcast ins(%bias : tensor<128xf32>) outs(%e : tensor<1260x128xf32>) dimensions = [0]
  %r = linalg.matmul ins(%a, %b : tensor<1260x16xf32>, tensor<16x128xf32>) outs(%c : tensor<1260x128xf32>) -> tensor<1260x128xf32>
  %y = linalg.generic {indexing_maps = [#mn, #mn], iterator_types = ["parallel", "parallel"]} ins(%r : tensor<1260x128xf32>) outs(%e : tensor<1260x128xf32>) {
  ^bb0(%x: f32, %o: f32):
    %m = arith.maximumf %x, %z : f32
    linalg.yield %m : f32
  } -> tensor<1260x128xf32>
  return %y : tensor<1260x128xf32>
}
