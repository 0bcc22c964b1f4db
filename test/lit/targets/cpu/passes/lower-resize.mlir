// etc-cpu-lower-resize: a bilinear __interpolate (what etc-cpu-edge-to-torch makes of
// upsample_bilinear2d.vec) -> a gather over tap tables computed at compile time as ATen computes
// them, on builtin tensors between torch_c casts, marked etc.cpu.resize with the tables.
// RUN: etc-opt %s --split-input-file --pass-pipeline='builtin.module(etc-cpu-edge-to-torch, etc-cpu-lower-resize)' | filecheck %s

// 3x4 -> 6x7, align_corners=False: rows at 0.5 (oy + 0.5) - 0.5 clamped at 0, i.e. 0, 0.25, 0.75,
// 1.25, 1.75, 2.25: input rows (0,1) (0,1) (0,1) (1,2) (1,2) (2,2), weights 1-f and f; columns at
// 4/7 (ox + 0.5) - 0.5.
// CHECK-LABEL: func.func @forward
// CHECK-NOT: torch.aten.__interpolate
// CHECK: %[[X:.*]] = torch_c.to_builtin_tensor %arg0 : !torch.vtensor<[1,2,3,4],f32> -> tensor<1x2x3x4xf32>
// CHECK: arith.constant dense<[0, 0, 0, 1, 1, 2]> : tensor<6xindex>
// CHECK: arith.constant dense<[1, 1, 1, 2, 2, 2]> : tensor<6xindex>
// CHECK: arith.constant dense<[1.000000e+00, 7.500000e-01, 2.500000e-01, 7.500000e-01, 2.500000e-01, 7.500000e-01]> : tensor<6xf32>
// CHECK: arith.constant dense<[0, 0, 0, 1, 2, 2, 3]> : tensor<7xindex>
// CHECK: arith.constant dense<[1, 1, 1, 2, 3, 3, 3]> : tensor<7xindex>
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : tensor<1x2x6x7xf32>) attrs = {etc.cpu.resize = {
// CHECK-SAME: cols0 = array<i64: 0, 0, 0, 1, 2, 2, 3>
// CHECK-SAME: rows0 = array<i64: 0, 0, 0, 1, 1, 2>, rows1 = array<i64: 1, 1, 1, 2, 2, 2>
// CHECK-COUNT-4: tensor.extract %[[X]]
// CHECK: torch_c.from_builtin_tensor %{{.*}} : tensor<1x2x6x7xf32> -> !torch.vtensor<[1,2,6,7],f32>
func.func @forward(%arg0: tensor<1x2x3x4xf32> {etc.dim_bounds = array<i64: 1, 1, 2, 2, 3, 3, 4, 4>}) -> tensor<1x2x6x7xf32> {
  %0 = "edge.upsample_bilinear2d_vec"(%arg0) {align_corners = false, operandSegmentSizes = array<i32: 1, 0>, output_size = array<i64: 6, 7>, scale_factors} : (tensor<1x2x3x4xf32>) -> tensor<1x2x6x7xf32>
  return %0 : tensor<1x2x6x7xf32>
}

// -----

// align_corners=True with a scale factor: corners map onto corners, 4 -> 8 rows at 3/7 oy.
// CHECK-LABEL: func.func @forward
// CHECK: arith.constant dense<[0, 0, 0, 1, 1, 2, 2, 3]> : tensor<8xindex>
// CHECK: arith.constant dense<[1, 1, 1, 2, 2, 3, 3, 3]> : tensor<8xindex>
// CHECK: etc.cpu.resize
func.func @forward(%arg0: tensor<1x1x4x4xf32> {etc.dim_bounds = array<i64: 1, 1, 1, 1, 4, 4, 4, 4>}) -> tensor<1x1x8x8xf32> {
  %0 = "edge.upsample_bilinear2d_vec"(%arg0) {align_corners = true, operandSegmentSizes = array<i32: 1, 0>, output_size, scale_factors = array<f64: 2.0, 2.0>} : (tensor<1x1x4x4xf32>) -> tensor<1x1x8x8xf32>
  return %0 : tensor<1x1x8x8xf32>
}

// -----

// A bilinear resize the table gather cannot take stays torch-mlir's, with the reason recorded.
// CHECK: module attributes {etc.cpu.decisions = [{kind = "resize", op = "torch.aten.__interpolate.size_list_scale_list", path = "loops", reason = "element type f16 (the table gather is f32)"
// CHECK: torch.aten.__interpolate.size_list_scale_list
// CHECK-NOT: etc.cpu.resize
func.func @forward(%arg0: tensor<1x2x3x4xf16> {etc.dim_bounds = array<i64: 1, 1, 2, 2, 3, 3, 4, 4>}) -> tensor<1x2x6x7xf16> {
  %0 = "edge.upsample_bilinear2d_vec"(%arg0) {align_corners = false, operandSegmentSizes = array<i32: 1, 0>, output_size = array<i64: 6, 7>, scale_factors} : (tensor<1x2x3x4xf16>) -> tensor<1x2x6x7xf16>
  return %0 : tensor<1x2x6x7xf16>
}
