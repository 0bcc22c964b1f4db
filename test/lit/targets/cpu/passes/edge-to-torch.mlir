// etc-cpu-edge-to-torch: edge ops become torch-dialect ops of the same ATen name, their schema
// arguments torch constants and lists; the inputs are labelled `input:<i>`, the constants become
// trailing arguments labelled `constant:<global>` (all read-only); an overload torch-mlir lacks goes
// through its adapter (no_training batch norm -> batch_norm, upsample_bilinear2d -> __interpolate).
// RUN: etc-opt %s --split-input-file --etc-cpu-edge-to-torch | filecheck %s
// RUN: etc-opt %s --split-input-file --pass-pipeline='builtin.module(etc-cpu-edge-to-torch, symbol-dce, torchdynamo-export-to-torch-backend-pipeline, torch-backend-to-linalg-on-tensors-backend-pipeline)' | filecheck %s --check-prefix=LINALG

ml_program.global private @w(#ml_program.extern : tensor<4x8xf32>) : tensor<4x8xf32>
ml_program.global private @b(#ml_program.extern : tensor<4xf32>) : tensor<4xf32>
ml_program.global private @unused(#ml_program.extern : tensor<i64>) : tensor<i64>

// The globals stay for the passes that read their data (etc-cpu-lower-quantized): symbol-dce drops them.
// CHECK: ml_program.global private @w
// CHECK-LABEL: func.func @delegate_cpu_0
// CHECK-SAME: (%[[X:[a-z0-9]+]]: !torch.vtensor<[2,8],f32> {bufferization.writable = false, etc.cpu.arg = "input:0"},
// CHECK-SAME: %[[Y:[a-z0-9]+]]: !torch.vtensor<[1,4,3,3],f32> {bufferization.writable = false, etc.cpu.arg = "input:1"},
// CHECK-SAME: %[[W:[a-z0-9]+]]: !torch.vtensor<[4,8],f32> {bufferization.writable = false, etc.cpu.arg = "constant:w"},
// CHECK-SAME: %[[B:[a-z0-9]+]]: !torch.vtensor<[4],f32> {bufferization.writable = false, etc.cpu.arg = "constant:b"})
// CHECK-SAME: -> (!torch.vtensor<[2,4],f32>, !torch.vtensor<[1,4,3,3],f32>)
func.func @delegate_cpu_0(%x: tensor<2x8xf32>, %y: tensor<1x4x3x3xf32>) -> (tensor<2x4xf32>, tensor<1x4x3x3xf32>) {
  %w = ml_program.global_load_const @w : tensor<4x8xf32>
  %b = ml_program.global_load_const @b : tensor<4xf32>
  %n = ml_program.global_load_const @unused : tensor<i64>
  // CHECK: %[[DIMS:[0-9]+]] = torch.prim.ListConstruct %{{.*}}, %{{.*}} : (!torch.int, !torch.int) -> !torch.list<int>
  // CHECK: %[[WT:[0-9]+]] = torch.aten.permute %[[W]], %[[DIMS]]
  %wt = "edge.permute"(%w) {dims = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  // CHECK: %[[MM:[0-9]+]] = torch.aten.addmm %[[B]], %[[X]], %[[WT]], %int1, %int1 :
  %mm = "edge.addmm"(%b, %x, %wt) {alpha = 1 : i64, beta = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0>} : (tensor<4xf32>, tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
  // CHECK: %[[R:[0-9]+]] = torch.aten.relu %[[MM]]
  %r = "edge.relu"(%mm) : (tensor<2x4xf32>) -> tensor<2x4xf32>
  // CHECK: torch.aten.batch_norm %[[Y]], %[[B]], %[[B]], %[[B]], %[[B]], %false, %float1.000000e-01, %float1.000000e-05, %false
  %bn:3 = "edge.p_native_batch_norm_legit_no_training"(%y, %b, %b, %b, %b) {eps = 1.000000e-05 : f64, momentum = 1.000000e-01 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1>} : (tensor<1x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<1x4x3x3xf32>, tensor<0xf32>, tensor<0xf32>)
  // CHECK-NOT: torch.aten.native_batch_norm
  // CHECK: %[[SM:[0-9]+]] = torch.aten._softmax %{{[0-9]+}}, %int1, %false
  %sm = "edge.p_softmax"(%bn#0) {dim = 1 : i64, half_to_float = false} : (tensor<1x4x3x3xf32>) -> tensor<1x4x3x3xf32>
  // CHECK: return %[[R]], %[[SM]]
  return %r, %sm : tensor<2x4xf32>, tensor<1x4x3x3xf32>
}
// LINALG-LABEL: func.func @delegate_cpu_0
// LINALG-NOT: ml_program.global
// LINALG: linalg.matmul

// -----

// A dynamic input keeps its bounds; the results' upper bounds go on the function for
// etc-cpu-dynamic-shapes; a symbolic size is torch's int ops.
// CHECK-LABEL: func.func @dynamic
// CHECK-SAME: etc.cpu.arg = "input:0", etc.dim_bounds = array<i64: 1, 8, 16, 16>
// CHECK-SAME: attributes {etc.cpu.result_bounds = [array<i64: 8, 16>]}
// CHECK: torch.aten.size.int %arg0, %int0
func.func @dynamic(%x: tensor<?x16xf32> {etc.dim_bounds = array<i64: 1, 8, 16, 16>}) -> tensor<?x16xf32> {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %x, %c0 : tensor<?x16xf32>
  %r = "edge.relu"(%x) {etc.upper_bounds = array<i64: 8, 16>} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  return %r : tensor<?x16xf32>
}

// -----

// CHECK-LABEL: func.func @upsample_0
// CHECK: %[[SCALES:.*]] = torch.prim.ListConstruct %float1.5{{.*}}, %float1.5{{.*}} : (!torch.float, !torch.float) -> !torch.list<float>
// CHECK: %[[MODE:.*]] = torch.constant.str "bilinear"
// CHECK: torch.aten.__interpolate.size_list_scale_list %arg0, %none, %[[SCALES]], %[[MODE]], %false, %none, %false
// CHECK-NOT: upsample_bilinear2d
// LINALG-LABEL: func.func @upsample_0
// LINALG: linalg.generic
// LINALG-COUNT-4: tensor.extract %arg0
func.func @upsample_0(%x: tensor<1x3x5x7xf32>) -> tensor<1x3x7x10xf32> {
  %r = "edge.upsample_bilinear2d_vec"(%x) {align_corners = false, operandSegmentSizes = array<i32: 1, 0>, output_size, scale_factors = array<f64: 1.5, 1.5>} : (tensor<1x3x5x7xf32>) -> tensor<1x3x7x10xf32>
  return %r : tensor<1x3x7x10xf32>
}

// -----

// CHECK-LABEL: func.func @upsample_1
// CHECK: %[[SIZE:.*]] = torch.prim.ListConstruct %{{.*}}, %{{.*}} : (!torch.int, !torch.int) -> !torch.list<int>
// CHECK: torch.aten.__interpolate.size_list_scale_list %arg0, %[[SIZE]], %none, %{{.*}}, %true, %none, %false
// LINALG-LABEL: func.func @upsample_1
// LINALG: linalg.generic
func.func @upsample_1(%x: tensor<1x3x5x7xf32>) -> tensor<1x3x13x17xf32> {
  %r = "edge.upsample_bilinear2d_vec"(%x) {align_corners = true, operandSegmentSizes = array<i32: 1, 0>, output_size = array<i64: 13, 17>, scale_factors} : (tensor<1x3x5x7xf32>) -> tensor<1x3x13x17xf32>
  return %r : tensor<1x3x13x17xf32>
}
