// index_put: torch-mlir's lowering is a tm_tensor.scatter our bufferization does not take, so the
// cpu target expands it as a loop over the K index tuples (torch.prim.Loop -> scf.for), each
// writing its row of values into x viewed as [pre, P, post] (P indexed positions; adjacent
// indexed dims need no copy for that), the values viewed as [pre, K, post], the indices
// linearized; accumulate adds the row to what is there. A position named twice takes its last
// write, as the loop runs in order.
// RUN: %PYTHON -m etc.targets.cpu.lower %s --stage torch | filecheck %s
// RUN: %PYTHON -m etc.targets.cpu.lower %s --stage linalg | filecheck %s --check-prefix=LINALG

// A KV-cache update cache[:, :, pos] = k: values [2, 3, 4] broadcast to [1, 2, 3, 4]; the cache is
// written in its own layout ([2, 16, 4], no permute), 3 new positions, one row each.
// CHECK-LABEL: func.func @delegate_cpu_0
// CHECK: %[[X:.*]] = torch_c.from_builtin_tensor %{{.*}} : {{.*}} -> !torch.vtensor<[2,16,4],f32>
// CHECK: torch.aten.expand %arg2, {{.*}} -> !torch.vtensor<[1,2,3,4],f32>
// CHECK: %[[VALUES:.*]] = torch_c.from_builtin_tensor {{.*}} -> !torch.vtensor<[2,3,4],f32>
// CHECK: %[[POS:.*]] = torch.aten.remainder.Scalar %arg1, %int16
// CHECK: torch.prim.Loop %int3, %true, init(%[[X]])
// CHECK-NEXT: ^bb0(%[[K:.*]]: !torch.int, %[[ACC:.*]]: !torch.vtensor<[2,16,4],f32>):
// CHECK: %[[SEL:.*]] = torch.aten.select.int %[[POS]], %int0, %[[K]]
// CHECK: %[[P:.*]] = torch.aten.Int.Tensor %[[SEL]]
// CHECK: %[[END:.*]] = torch.aten.add.int %[[P]]
// CHECK: %[[ROW:.*]] = torch.aten.slice.Tensor %[[VALUES]], %{{.*}}, %[[K]], {{.*}} -> !torch.vtensor<[2,1,4],f32>
// CHECK: %[[NEW:.*]] = torch.aten.slice_scatter %[[ACC]], %[[ROW]], %{{.*}}, %[[P]], %[[END]],
// CHECK: torch.prim.Loop.condition %{{.*}}, iter(%[[NEW]] : !torch.vtensor<[2,16,4],f32>)
// CHECK-NOT: torch.aten.permute
// CHECK: torch_c.from_builtin_tensor {{.*}} -> !torch.vtensor<[1,2,16,4],f32>
// LINALG-LABEL: func.func @delegate_cpu_0
// LINALG-NOT: tm_tensor
// LINALG: %[[OUT:.*]] = scf.for {{.*}} iter_args(%[[ACC:.*]] = %collapsed) -> (tensor<2x16x4xf32>)
// LINALG: %[[P:.*]] = tensor.extract
// LINALG: tensor.insert_slice %{{.*}} into %[[ACC]][0, %{{.*}}, 0] [2, 1, 4] [1, 1, 1]
// LINALG: tensor.expand_shape %[[OUT]]
// LINALG: return
func.func private @delegate_cpu_0(%k: tensor<1x2x16x4xf32>, %pos: tensor<3xi64>, %x: tensor<2x3x4xf32>) -> tensor<1x2x16x4xf32> {
  %1 = "edge.index_put"(%k, %pos, %x) {accumulate = false, indices_mask = array<i1: false, false, true>, operandSegmentSizes = array<i32: 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1>} : (tensor<1x2x16x4xf32>, tensor<3xi64>, tensor<2x3x4xf32>) -> tensor<1x2x16x4xf32>
  return %1 : tensor<1x2x16x4xf32>
}

// accumulate=True: each row is added to the one at its position.
// CHECK-LABEL: func.func @delegate_cpu_1
// CHECK: torch.prim.Loop %int3, %true, init(%{{.*}})
// CHECK: %[[OLD:.*]] = torch.aten.slice.Tensor %[[ACC:arg[0-9]+]], {{.*}} -> !torch.vtensor<[1,1,3],f32>
// CHECK: %[[SUM:.*]] = torch.aten.add.Tensor %[[OLD]], {{.*}} -> !torch.vtensor<[1,1,3],f32>
// CHECK: torch.aten.slice_scatter %[[ACC]], %[[SUM]],
// LINALG-LABEL: func.func @delegate_cpu_1
// LINALG: scf.for
// LINALG: arith.addf
// LINALG: tensor.insert_slice
func.func private @delegate_cpu_1(%a: tensor<5x3xf32>, %i: tensor<3xi64>, %v: tensor<3x3xf32>) -> tensor<5x3xf32> {
  %0 = "edge.index_put"(%a, %i, %v) {accumulate = true, indices_mask = array<i1: true>, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1>} : (tensor<5x3xf32>, tensor<3xi64>, tensor<3x3xf32>) -> tensor<5x3xf32>
  return %0 : tensor<5x3xf32>
}
