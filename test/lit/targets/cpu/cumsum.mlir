// cumsum: torch-mlir's lowering is a tm_tensor.scan our bufferization does not take, so the cpu
// target expands it into a Hillis-Steele scan: ceil(log2 n) steps of x + (x shifted by 2^k along the
// dim, zero-filled), each a slice, a constant_pad_nd and an add. A bool/int32 input is converted to
// the int64 result first.
// RUN: %PYTHON -m etc.targets.cpu.lower %s --stage torch | filecheck %s
// RUN: %PYTHON -m etc.targets.cpu.lower %s --stage linalg | filecheck %s --check-prefix=LINALG

// n = 7 along dim 1: shifts 1, 2, 4.
// CHECK-LABEL: func.func @delegate_cpu_0
// CHECK: %[[X:.*]] = torch.aten.to.dtype %arg0, %int4, %false, %false, %none : !torch.vtensor<[2,7],i1>, !torch.int, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[2,7],si64>
// CHECK: %[[H1:.*]] = torch.aten.slice.Tensor %[[X]], %int1, %int0, %int6, %int1 : {{.*}} -> !torch.vtensor<[2,6],si64>
// CHECK: %[[P1:.*]] = torch.aten.constant_pad_nd %[[H1]], %{{.*}}, %int0 : {{.*}} -> !torch.vtensor<[2,7],si64>
// CHECK: %[[S1:.*]] = torch.aten.add.Tensor %[[X]], %[[P1]], %int1
// CHECK: torch.aten.slice.Tensor %[[S1]], %int1, %int0, %int5, %int1 : {{.*}} -> !torch.vtensor<[2,5],si64>
// CHECK: %[[S2:.*]] = torch.aten.add.Tensor %[[S1]]
// CHECK: torch.aten.slice.Tensor %[[S2]], %int1, %int0, %int3, %int1 : {{.*}} -> !torch.vtensor<[2,3],si64>
// CHECK: %[[S3:.*]] = torch.aten.add.Tensor %[[S2]]
// CHECK-NOT: torch.aten.add.Tensor
// CHECK: return %[[S3]]
// LINALG-LABEL: func.func @delegate_cpu_0
// LINALG-NOT: tm_tensor
// LINALG: return
func.func private @delegate_cpu_0(%m: tensor<2x7xi1>) -> tensor<2x7xi64> {
  %r = "edge.cumsum"(%m) {dim = -1 : i64, dtype} : (tensor<2x7xi1>) -> tensor<2x7xi64>
  return %r : tensor<2x7xi64>
}

// Float along dim 0 of a [3, 5]: pads before the first dim; a size-1 dim needs no step.
// CHECK-LABEL: func.func @delegate_cpu_1
// CHECK: torch.aten.slice.Tensor %arg0, %int0, %int0, %int2, %int1 : {{.*}} -> !torch.vtensor<[2,5],f32>
// CHECK: %[[PAD:.*]] = torch.prim.ListConstruct %int0, %int0, %int1, %int0 :
// CHECK: torch.aten.constant_pad_nd %{{.*}}, %[[PAD]], %float0.000000e00
// CHECK-COUNT-2: torch.aten.add.Tensor
// CHECK-LABEL: func.func @delegate_cpu_2
// CHECK-NOT: torch.aten.add.Tensor
// CHECK: return %arg0
func.func private @delegate_cpu_1(%x: tensor<3x5xf32>) -> tensor<3x5xf32> {
  %r = "edge.cumsum"(%x) {dim = 0 : i64, dtype} : (tensor<3x5xf32>) -> tensor<3x5xf32>
  return %r : tensor<3x5xf32>
}

func.func private @delegate_cpu_2(%x: tensor<4x1xf32>) -> tensor<4x1xf32> {
  %r = "edge.cumsum"(%x) {dim = 1 : i64, dtype} : (tensor<4x1xf32>) -> tensor<4x1xf32>
  return %r : tensor<4x1xf32>
}

// Along a dynamic dim (upper bound 6: shifts 1, 2, 4): the shift pads x first and keeps its first
// `size` elements, the run-time size; right at every size (found by the compiler fuzzer: the steps
// counted the dynamic sentinel, none ran, and x came back as its own cumsum).
// CHECK-LABEL: func.func @delegate_cpu_3
// CHECK: %[[N:.*]] = torch.aten.size.int %arg0, %int1
// CHECK: %[[P1:.*]] = torch.aten.constant_pad_nd %arg0, %{{.*}} -> !torch.vtensor<[2,?],f32>
// CHECK: %[[H1:.*]] = torch.aten.slice.Tensor %[[P1]], %int1, %int0, %[[N]], %int1 : {{.*}} -> !torch.vtensor<[2,?],f32>
// CHECK: %[[S1:.*]] = torch.aten.add.Tensor %arg0, %[[H1]], %int1
// CHECK: torch.aten.constant_pad_nd %[[S1]]
// CHECK: %[[S2:.*]] = torch.aten.add.Tensor %[[S1]]
// CHECK: torch.aten.constant_pad_nd %[[S2]]
// CHECK: %[[S3:.*]] = torch.aten.add.Tensor %[[S2]]
// CHECK-NOT: torch.aten.add.Tensor
// CHECK: return %[[S3]]
func.func private @delegate_cpu_3(%x: tensor<2x?xf32> {etc.dim_bounds = array<i64: 2, 2, 1, 6>}) -> tensor<2x?xf32> {
  %r = "edge.cumsum"(%x) {dim = 1 : i64, dtype, etc.upper_bounds = array<i64: 2, 6>} : (tensor<2x?xf32>) -> tensor<2x?xf32>
  return %r : tensor<2x?xf32>
}
