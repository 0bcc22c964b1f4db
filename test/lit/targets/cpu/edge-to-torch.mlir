// Edge ops become torch-dialect ops of the same ATen name, their schema arguments
// torch constants and lists; constants become trailing arguments; an overload
// torch-mlir lacks goes through its adapter (no_training batch norm -> batch_norm).
// RUN: %PYTHON -m etc.targets.cpu.lower %s --stage torch | filecheck %s

ml_program.global private @w(#ml_program.extern : tensor<4x8xf32>) : tensor<4x8xf32>
ml_program.global private @b(#ml_program.extern : tensor<4xf32>) : tensor<4xf32>
ml_program.global private @unused(#ml_program.extern : tensor<i64>) : tensor<i64>

// CHECK: // arguments: [('input', 0), ('input', 1), ('constant', 'w'), ('constant', 'b')]
// CHECK-LABEL: func.func @delegate_cpu_0
// CHECK-SAME: (%[[X:[a-z0-9]+]]: !torch.vtensor<[2,8],f32>, %[[Y:[a-z0-9]+]]: !torch.vtensor<[1,4,3,3],f32>, %[[W:[a-z0-9]+]]: !torch.vtensor<[4,8],f32>, %[[B:[a-z0-9]+]]: !torch.vtensor<[4],f32>)
// CHECK-SAME: -> (!torch.vtensor<[2,4],f32>, !torch.vtensor<[1,4,3,3],f32>)
func.func private @delegate_cpu_0(%x: tensor<2x8xf32>, %y: tensor<1x4x3x3xf32>) -> (tensor<2x4xf32>, tensor<1x4x3x3xf32>) {
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
