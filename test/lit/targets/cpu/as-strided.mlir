// as_strided (over the input's contiguous storage) has no torch-mlir lowering; with static sizes and
// strides the cpu target expands it: non-overlapping dims (each fitting inside the next larger
// stride, which it divides) become a view chain (flatten, slice at the offset, reshape into a box,
// slices, permute back to the output's order, broadcast of stride-0 dims); overlapping ones (sliding
// windows) a gather with a constant index tensor.
// RUN: %PYTHON -m etc.targets.cpu.lower %s --stage torch | filecheck %s
// RUN: %PYTHON -m etc.targets.cpu.lower %s --stage linalg | filecheck %s --check-prefix=LINALG

// A 4x4 window partition of [1, 8, 12, 3]: box [2, 4, 3, 4, 3, 1] (strides 144/36/12/3/1), no
// slicing needed, permuted to the output's (window row, window col, row, col, channel) order.
// CHECK-LABEL: func.func @delegate_cpu_0
// CHECK: %[[F:.*]] = torch_c.from_builtin_tensor %{{.*}} : {{.*}} -> !torch.vtensor<[288],f32>
// CHECK: %[[B:.*]] = torch_c.from_builtin_tensor %{{.*}} : {{.*}} -> !torch.vtensor<[2,4,3,4,3,1],f32>
// CHECK-NOT: torch.aten.slice.Tensor
// CHECK: %[[V:.*]] = torch_c.from_builtin_tensor %{{.*}} : {{.*}} -> !torch.vtensor<[2,4,3,4,3],f32>
// CHECK: %[[P:.*]] = torch.prim.ListConstruct %int0, %int2, %int1, %int3, %int4
// CHECK: torch.aten.permute %[[V]], %[[P]] {{.*}} -> !torch.vtensor<[2,3,4,4,3],f32>
// CHECK-NOT: index_select
// LINALG-LABEL: func.func @delegate_cpu_0
// LINALG-NOT: tensor.extract %
func.func private @delegate_cpu_0(%x: tensor<1x8x12x3xf32>) -> tensor<2x3x4x4x3xf32> {
  %r = "edge.as_strided"(%x) {operandSegmentSizes = array<i32: 1, 0, 0, 0>, size = array<i64: 2, 3, 4, 4, 3>, storage_offset, stride = array<i64: 144, 12, 36, 3, 1>} : (tensor<1x8x12x3xf32>) -> tensor<2x3x4x4x3xf32>
  return %r : tensor<2x3x4x4x3xf32>
}

// Every other row and every other column of [9, 11] from offset 1: the box [5, 11, 2] (rows 22
// apart, columns 2 apart) sliced to [5, 6, 1]; it runs past the storage's 99 elements, which are
// padded (nothing reads the padding).
// CHECK-LABEL: func.func @delegate_cpu_1
// CHECK: torch.aten.constant_pad_nd %{{.*}} -> !torch.vtensor<[111],f32>
// CHECK: torch.aten.slice.Tensor %{{.*}}, %int0, %int1, %int111, %int1 : {{.*}} -> !torch.vtensor<[110],f32>
// CHECK: torch_c.from_builtin_tensor %{{.*}} -> !torch.vtensor<[5,11,2],f32>
// CHECK: torch.aten.slice.Tensor {{.*}} -> !torch.vtensor<[5,6,2],f32>
// CHECK: torch.aten.slice.Tensor {{.*}} -> !torch.vtensor<[5,6,1],f32>
// CHECK: torch_c.from_builtin_tensor {{.*}} -> !torch.vtensor<[5,6],f32>
func.func private @delegate_cpu_1(%x: tensor<9x11xf32>) -> tensor<5x6xf32> {
  %r = "edge.as_strided"(%x) {operandSegmentSizes = array<i32: 1, 0, 0, 0>, size = array<i64: 5, 6>, storage_offset = 1 : i64, stride = array<i64: 22, 2>} : (tensor<9x11xf32>) -> tensor<5x6xf32>
  return %r : tensor<5x6xf32>
}

// Overlapping windows (size 5, step 2): a gather with a constant index tensor.
// CHECK-LABEL: func.func @delegate_cpu_2
// CHECK: %[[I:.*]] = torch.vtensor.literal(dense<{{\[}}0, 1, 2, 3, 4, 2, 3, 4, 5, 6, 4{{.*}}> : tensor<35xsi64>) : !torch.vtensor<[35],si64>
// CHECK: torch.aten.index_select %{{.*}}, %int0, %[[I]] {{.*}} -> !torch.vtensor<[35],f32>
// CHECK: torch_c.from_builtin_tensor {{.*}} -> !torch.vtensor<[7,5],f32>
// LINALG-LABEL: func.func @delegate_cpu_2
// LINALG: arith.constant dense<{{.*}}> : tensor<35xi64>
func.func private @delegate_cpu_2(%x: tensor<17xf32>) -> tensor<7x5xf32> {
  %r = "edge.as_strided"(%x) {operandSegmentSizes = array<i32: 1, 0, 0, 0>, size = array<i64: 7, 5>, storage_offset, stride = array<i64: 2, 1>} : (tensor<17xf32>) -> tensor<7x5xf32>
  return %r : tensor<7x5xf32>
}

// A stride-0 dim broadcasts (expand); a size-1 dim takes any stride.
// CHECK-LABEL: func.func @delegate_cpu_3
// CHECK: torch_c.from_builtin_tensor {{.*}} -> !torch.vtensor<[1,1,6],f32>
// CHECK: torch.aten.expand {{.*}} -> !torch.vtensor<[3,1,6],f32>
func.func private @delegate_cpu_3(%x: tensor<4x6xf32>) -> tensor<3x1x6xf32> {
  %r = "edge.as_strided"(%x) {operandSegmentSizes = array<i32: 1, 0, 0, 0>, size = array<i64: 3, 1, 6>, storage_offset = 6 : i64, stride = array<i64: 0, 999, 1>} : (tensor<4x6xf32>) -> tensor<3x1x6xf32>
  return %r : tensor<3x1x6xf32>
}

// Swin's pooler (AdaptiveAvgPool1d decomposed): [1, 24, 1, 1] with strides (24, 1, 24, 24), the
// input itself: views only, which fold away in linalg.
// CHECK-LABEL: func.func @delegate_cpu_4
// CHECK-NOT: torch.aten.slice.Tensor
// CHECK-NOT: torch.aten.permute
// CHECK-NOT: torch.aten.index_select
// CHECK: return
// LINALG-LABEL: func.func @delegate_cpu_4
// LINALG-NOT: linalg.generic
// LINALG: return
func.func private @delegate_cpu_4(%x: tensor<1x24x1x1xf32>) -> tensor<1x24x1x1xf32> {
  %r = "edge.as_strided"(%x) {operandSegmentSizes = array<i32: 1, 0, 0, 0>, size = array<i64: 1, 24, 1, 1>, storage_offset, stride = array<i64: 24, 1, 24, 24>} : (tensor<1x24x1x1xf32>) -> tensor<1x24x1x1xf32>
  return %r : tensor<1x24x1x1xf32>
}
