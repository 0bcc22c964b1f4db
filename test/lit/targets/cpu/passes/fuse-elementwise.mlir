// RUN: etc-opt %s --etc-cpu-gemm-kernels --etc-cpu-fuse-elementwise | filecheck %s

// The norm's elementwise ops fuse among themselves, and the bias + ReLU after the contraction
// fuse among themselves, but neither into the contraction: it is a call to its kernel (a
// declaration until etc-cpu-gemm-regions defines it), which fusion cannot enter.
// CHECK-LABEL: func.func @norm_linear_relu
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]
// CHECK: math.rsqrt
// CHECK: %[[MM:.*]] = call @etc_gemm_m
// CHECK: linalg.generic {{.*}} ins(%[[MM]]
// CHECK: arith.addf
// CHECK: arith.maximumf
// CHECK: func.func private @etc_gemm_m{{[0-9]+}}(tensor<32x128xf32>, tensor<128x256xf32>, tensor<32x256xf32>) -> tensor<32x256xf32>
#x = affine_map<(t, c) -> (t, c)>
#c = affine_map<(t, c) -> (c)>
func.func @norm_linear_relu(%x: tensor<32x128xf32>, %g: tensor<128xf32>, %w: tensor<128x256xf32>, %bias: tensor<256xf32>) -> tensor<32x256xf32> {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<32x128xf32>
  %r = linalg.generic {indexing_maps = [#x, #x], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<32x128xf32>) outs(%e1 : tensor<32x128xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = math.rsqrt %a : f32
    linalg.yield %s : f32
  } -> tensor<32x128xf32>
  %n = linalg.generic {indexing_maps = [#x, #c, #x], iterator_types = ["parallel", "parallel"]} ins(%r, %g : tensor<32x128xf32>, tensor<128xf32>) outs(%e1 : tensor<32x128xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    linalg.yield %m : f32
  } -> tensor<32x128xf32>
  %e2 = tensor.empty() : tensor<32x256xf32>
  %z2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<32x256xf32>) -> tensor<32x256xf32>
  %mm = linalg.matmul ins(%n, %w : tensor<32x128xf32>, tensor<128x256xf32>) outs(%z2 : tensor<32x256xf32>) -> tensor<32x256xf32>
  %b = linalg.generic {indexing_maps = [#x, #c, #x], iterator_types = ["parallel", "parallel"]} ins(%mm, %bias : tensor<32x256xf32>, tensor<256xf32>) outs(%e2 : tensor<32x256xf32>) {
  ^bb0(%a: f32, %bb: f32, %o: f32):
    %s = arith.addf %a, %bb : f32
    linalg.yield %s : f32
  } -> tensor<32x256xf32>
  %y = linalg.generic {indexing_maps = [#x, #x], iterator_types = ["parallel", "parallel"]} ins(%b : tensor<32x256xf32>) outs(%e2 : tensor<32x256xf32>) {
  ^bb0(%a: f32, %o: f32):
    %m = arith.maximumf %a, %zero : f32
    linalg.yield %m : f32
  } -> tensor<32x256xf32>
  return %y : tensor<32x256xf32>
}
