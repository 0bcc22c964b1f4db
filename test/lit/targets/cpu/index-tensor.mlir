// index.Tensor's `Tensor?[]` indices become torch-mlir's !torch.list<optional<vtensor>> (None
// entries as torch.constant.none), which its index lowering takes (GPT-2/Llama mask indexing).
// RUN: %PYTHON -m etc.targets.cpu.lower %s --stage torch | filecheck %s
// RUN: %PYTHON -m etc.targets.cpu.lower %s --stage linalg | filecheck %s --check-prefix=LINALG

// CHECK-LABEL: func.func @delegate_cpu_0
// CHECK: %[[L:.*]] = torch.prim.ListConstruct %arg1, %arg2 : (!torch.vtensor<[1,1,1,1],si64>, !torch.vtensor<[1,1,1,7],si64>) -> !torch.list<optional<vtensor>>
// CHECK: torch.aten.index.Tensor %arg0, %[[L]] : !torch.vtensor<[1,7],i1>, !torch.list<optional<vtensor>> -> !torch.vtensor<[1,1,1,7],i1>
// LINALG-LABEL: func.func @delegate_cpu_0
// LINALG: linalg.generic
// LINALG: tensor.extract %arg0
func.func private @delegate_cpu_0(%m: tensor<1x7xi1>, %b: tensor<1x1x1x1xi64>, %k: tensor<1x1x1x7xi64>) -> tensor<1x1x1x7xi1> {
  %r = "edge.index_tensor"(%m, %b, %k) {indices_mask = array<i1: true, true>, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<1x7xi1>, tensor<1x1x1x1xi64>, tensor<1x1x1x7xi64>) -> tensor<1x1x1x7xi1>
  return %r : tensor<1x1x1x7xi1>
}

// A None entry (x[:, idx]): the first dim is kept whole.
// CHECK-LABEL: func.func @delegate_cpu_1
// CHECK: %[[L1:.*]] = torch.prim.ListConstruct %none, %arg1 : (!torch.none, !torch.vtensor<[3],si64>) -> !torch.list<optional<vtensor>>
// CHECK: torch.aten.index.Tensor %arg0, %[[L1]] : !torch.vtensor<[4,5],f32>, !torch.list<optional<vtensor>> -> !torch.vtensor<[4,3],f32>
func.func private @delegate_cpu_1(%x: tensor<4x5xf32>, %i: tensor<3xi64>) -> tensor<4x3xf32> {
  %r = "edge.index_tensor"(%x, %i) {indices_mask = array<i1: false, true>, operandSegmentSizes = array<i32: 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4x5xf32>, tensor<3xi64>) -> tensor<4x3xf32>
  return %r : tensor<4x3xf32>
}

// int32 indices are widened to int64 first (torch-mlir's lowering compares them with i64 bounds).
// CHECK-LABEL: func.func @delegate_cpu_2
// CHECK: %[[W:.*]] = torch.aten.to.dtype %arg1, %int4, {{.*}} -> !torch.vtensor<[3],si64>
// CHECK: %[[L2:.*]] = torch.prim.ListConstruct %[[W]] : (!torch.vtensor<[3],si64>) -> !torch.list<optional<vtensor>>
// CHECK: torch.aten.index.Tensor %arg0, %[[L2]]
// LINALG-LABEL: func.func @delegate_cpu_2
// LINALG: arith.extsi
func.func private @delegate_cpu_2(%x: tensor<4x5xf32>, %i: tensor<3xi32>) -> tensor<3x5xf32> {
  %r = "edge.index_tensor"(%x, %i) {indices_mask = array<i1: true>, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4x5xf32>, tensor<3xi32>) -> tensor<3x5xf32>
  return %r : tensor<3x5xf32>
}
