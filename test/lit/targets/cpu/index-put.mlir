// index_put: torch-mlir's lowering is a tm_tensor.scatter our bufferization does not take, so the
// cpu target expands it as a one-hot select over x viewed as [pre, P, post] (P indexed positions;
// adjacent indexed dims need no copy for that), the values as [pre, K, post], the indices
// linearized to eq[k, p] = (index[k] == p); accumulate adds eq^T @ values, otherwise each position
// takes the values of the last k naming it (amax of where(eq, k, -1)) or keeps x.
// RUN: %PYTHON -m etc.targets.cpu.lower %s --stage torch | filecheck %s
// RUN: %PYTHON -m etc.targets.cpu.lower %s --stage linalg | filecheck %s --check-prefix=LINALG

// A KV-cache update cache[:, :, pos] = k: values [2, 3, 4] broadcast to [1, 2, 3, 4]; the cache is
// selected in its own layout ([2, 16, 4], no permute), 3 new positions.
// CHECK-LABEL: func.func @delegate_cpu_0
// CHECK: %[[X:.*]] = torch.aten.view %arg0, {{.*}} -> !torch.vtensor<[2,16,4],f32>
// CHECK: torch.aten.expand %arg2, {{.*}} -> !torch.vtensor<[1,2,3,4],f32>
// CHECK: %[[VALUES:.*]] = torch.aten.view {{.*}} -> !torch.vtensor<[2,3,4],f32>
// CHECK: torch.aten.remainder.Scalar %arg1, %int16
// CHECK: %[[EQ:.*]] = torch.aten.eq.Tensor {{.*}} -> !torch.vtensor<[3,16],i1>
// CHECK: %[[WHICH:.*]] = torch.aten.where.self %[[EQ]]
// CHECK: %[[LAST:.*]] = torch.aten.amax %[[WHICH]], {{.*}} -> !torch.vtensor<[16],si64>
// CHECK: %[[TAKEN:.*]] = torch.aten.index_select %[[VALUES]], %int1, {{.*}} -> !torch.vtensor<[2,16,4],f32>
// CHECK: torch.aten.where.self %{{.*}}, %[[TAKEN]], %[[X]]
// CHECK-NOT: torch.aten.permute
// CHECK: torch.aten.view {{.*}} -> !torch.vtensor<[1,2,16,4],f32>
// LINALG-LABEL: func.func @delegate_cpu_0
// LINALG-NOT: tm_tensor
// LINALG: return
func.func private @delegate_cpu_0(%k: tensor<1x2x16x4xf32>, %pos: tensor<3xi64>, %x: tensor<2x3x4xf32>) -> tensor<1x2x16x4xf32> {
  %1 = "edge.index_put"(%k, %pos, %x) {accumulate = false, indices_mask = array<i1: false, false, true>, operandSegmentSizes = array<i32: 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1>} : (tensor<1x2x16x4xf32>, tensor<3xi64>, tensor<2x3x4xf32>) -> tensor<1x2x16x4xf32>
  return %1 : tensor<1x2x16x4xf32>
}

// accumulate=True: a matmul of the one-hot's transpose with the values.
// CHECK-LABEL: func.func @delegate_cpu_1
// CHECK: torch.aten.eq.Tensor {{.*}} -> !torch.vtensor<[3,5],i1>
// CHECK: torch.aten.to.dtype {{.*}} -> !torch.vtensor<[5,3],f32>
// CHECK: %[[ADD:.*]] = torch.aten.matmul {{.*}} -> !torch.vtensor<[1,5,3],f32>
// CHECK: torch.aten.add.Tensor %{{.*}}, %[[ADD]]
// LINALG-LABEL: func.func @delegate_cpu_1
// LINALG: linalg.{{(batch_)?}}matmul
func.func private @delegate_cpu_1(%a: tensor<5x3xf32>, %i: tensor<3xi64>, %v: tensor<3x3xf32>) -> tensor<5x3xf32> {
  %0 = "edge.index_put"(%a, %i, %v) {accumulate = true, indices_mask = array<i1: true>, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1>} : (tensor<5x3xf32>, tensor<3xi64>, tensor<3x3xf32>) -> tensor<5x3xf32>
  return %0 : tensor<5x3xf32>
}
