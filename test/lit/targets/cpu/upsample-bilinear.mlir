// upsample_bilinear2d.vec has a torch-mlir op but no lowering: the adapter rewrites it onto
// __interpolate (whose resize lowering is one linalg.generic), keeping the scale factors when
// given (ATen's coordinate map for recompute_scale_factor=None) and the sizes otherwise.
// RUN: %PYTHON -m etc.targets.cpu.lower %s --stage torch | filecheck %s
// RUN: %PYTHON -m etc.targets.cpu.lower %s --stage linalg | filecheck %s --check-prefix=LINALG

// CHECK-LABEL: func.func @delegate_cpu_0
// CHECK: %[[SCALES:.*]] = torch.prim.ListConstruct %float1.5{{.*}}, %float1.5{{.*}} : (!torch.float, !torch.float) -> !torch.list<float>
// CHECK: %[[MODE:.*]] = torch.constant.str "bilinear"
// CHECK: torch.aten.__interpolate.size_list_scale_list %arg0, %none, %[[SCALES]], %[[MODE]], %false, %none, %false
// CHECK-NOT: upsample_bilinear2d
// LINALG-LABEL: func.func @delegate_cpu_0
// LINALG: linalg.generic
// LINALG-COUNT-4: tensor.extract %arg0
func.func private @delegate_cpu_0(%x: tensor<1x3x5x7xf32>) -> tensor<1x3x7x10xf32> {
  %r = "edge.upsample_bilinear2d_vec"(%x) {align_corners = false, operandSegmentSizes = array<i32: 1, 0>, output_size, scale_factors = array<f64: 1.5, 1.5>} : (tensor<1x3x5x7xf32>) -> tensor<1x3x7x10xf32>
  return %r : tensor<1x3x7x10xf32>
}

// CHECK-LABEL: func.func @delegate_cpu_1
// CHECK: %[[SIZE:.*]] = torch.prim.ListConstruct %{{.*}}, %{{.*}} : (!torch.int, !torch.int) -> !torch.list<int>
// CHECK: torch.aten.__interpolate.size_list_scale_list %arg0, %[[SIZE]], %none, %{{.*}}, %true, %none, %false
// LINALG-LABEL: func.func @delegate_cpu_1
// LINALG: linalg.generic
func.func private @delegate_cpu_1(%x: tensor<1x3x5x7xf32>) -> tensor<1x3x13x17xf32> {
  %r = "edge.upsample_bilinear2d_vec"(%x) {align_corners = true, operandSegmentSizes = array<i32: 1, 0>, output_size = array<i64: 13, 17>, scale_factors} : (tensor<1x3x5x7xf32>) -> tensor<1x3x13x17xf32>
  return %r : tensor<1x3x13x17xf32>
}
