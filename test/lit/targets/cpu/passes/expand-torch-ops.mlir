// etc-cpu-expand-torch-ops: the torch ops torch-mlir does not lower to what the cpu codegen takes, as
// torch ops it does (lowering/expansions.py). Each function goes through etc-cpu-edge-to-torch first
// (its edge ops as the torch ops of their ATen names); the second run then goes on through torch-mlir's pipelines.
// RUN: etc-opt %s --split-input-file --pass-pipeline='builtin.module(etc-cpu-edge-to-torch, etc-cpu-expand-torch-ops)' | filecheck %s
// RUN: etc-opt %s --split-input-file --pass-pipeline='builtin.module(etc-cpu-edge-to-torch, etc-cpu-expand-torch-ops, symbol-dce, torchdynamo-export-to-torch-backend-pipeline, torch-backend-to-linalg-on-tensors-backend-pipeline)' | filecheck %s --check-prefix=LINALG

// ===== view =====
// A view is a row-major reshape: the cpu target lowers it to tensor.collapse_shape /
// tensor.expand_shape on builtin tensors itself (lowering/reshape.py), with groups that hold at every
// run-time size, instead of torch-mlir's aten.view lowering, which with two dynamic dims guessed
// [b, t, 64] -> [b * t, 64] to be a cast to [b, 1, 64] (wrong for every t > 1).

// Two dynamic dims merged: the static 64 matches from the right, the rest is one group.
// CHECK-LABEL: func.func @view_0
// CHECK: %[[X:.*]] = torch_c.to_builtin_tensor %arg0 : !torch.vtensor<[?,?,64],f32> -> tensor<?x?x64xf32>
// CHECK-NOT: tensor.cast
// CHECK: tensor.collapse_shape %[[X]] {{\[}}[0, 1], [2]] : tensor<?x?x64xf32> into tensor<?x64xf32>
// CHECK-NOT: tensor.expand_shape
func.func @view_0(%x: tensor<?x?x64xf32> {etc.dim_bounds = array<i64: 1, 8, 1, 64, 64, 64>}) -> tensor<?x64xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %b = tensor.dim %x, %c0 : tensor<?x?x64xf32>
  %t = tensor.dim %x, %c1 : tensor<?x?x64xf32>
  %bt = arith.muli %b, %t : index
  %r = "edge.view"(%x, %bt) {operandSegmentSizes = array<i32: 1, 1>, size = array<i64: -9223372036854775808, 64>} : (tensor<?x?x64xf32>, index) -> tensor<?x64xf32>
  return %r : tensor<?x64xf32>
}

// -----

// Split again: the result's dynamic sizes are the view's own size values.
// CHECK-LABEL: func.func @view_1
// CHECK: %[[B:.*]] = torch.aten.size.int %arg0, %int0
// CHECK: %[[T:.*]] = torch.aten.size.int %arg0, %int1
// CHECK: %[[Y:.*]] = torch_c.to_builtin_tensor %arg1
// CHECK-DAG: %[[B64:.*]] = torch_c.to_i64 %[[B]]
// CHECK-DAG: %[[T64:.*]] = torch_c.to_i64 %[[T]]
// CHECK-DAG: %[[BI:.*]] = arith.index_cast %[[B64]] : i64 to index
// CHECK-DAG: %[[TI:.*]] = arith.index_cast %[[T64]] : i64 to index
// CHECK: tensor.expand_shape %[[Y]] {{\[}}[0, 1], [2]] output_shape [%[[BI]], %[[TI]], 128] : tensor<?x128xf32> into tensor<?x?x128xf32>
func.func @view_1(%x: tensor<?x?x64xf32> {etc.dim_bounds = array<i64: 1, 8, 1, 64, 64, 64>}, %y: tensor<?x128xf32> {etc.dim_bounds = array<i64: 1, 512, 128, 128>}) -> tensor<?x?x128xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %b = tensor.dim %x, %c0 : tensor<?x?x64xf32>
  %t = tensor.dim %x, %c1 : tensor<?x?x64xf32>
  %r = "edge.view"(%y, %b, %t) {operandSegmentSizes = array<i32: 1, 2>, size = array<i64: -9223372036854775808, -9223372036854775808, 128>} : (tensor<?x128xf32>, index, index) -> tensor<?x?x128xf32>
  return %r : tensor<?x?x128xf32>
}

// -----

// No group can be proven ([n, 6] -> [m, 4]): collapsed to one dim and expanded again, which is
// right whatever n is.
// CHECK-LABEL: func.func @view_2
// CHECK: %[[F:.*]] = tensor.collapse_shape %{{.*}} {{\[}}[0, 1]] : tensor<?x6xf32> into tensor<?xf32>
// CHECK: tensor.expand_shape %[[F]] {{\[}}[0, 1]] output_shape [%{{.*}}, 4] : tensor<?xf32> into tensor<?x4xf32>
func.func @view_2(%x: tensor<?x6xf32> {etc.dim_bounds = array<i64: 2, 8, 6, 6>}) -> tensor<?x4xf32> {
  %c0 = arith.constant 0 : index
  %c3 = arith.constant 3 : index
  %c2 = arith.constant 2 : index
  %n = tensor.dim %x, %c0 : tensor<?x6xf32>
  %n3 = arith.muli %n, %c3 : index
  %m = arith.floordivsi %n3, %c2 : index
  %r = "edge.view"(%x, %m) {operandSegmentSizes = array<i32: 1, 1>, size = array<i64: -9223372036854775808, 4>} : (tensor<?x6xf32>, index) -> tensor<?x4xf32>
  return %r : tensor<?x4xf32>
}

// -----

// Static sizes: the finest groups ([2, 3, 4] -> [6, 2, 2]: [0, 1] -> [0], [2] -> [1, 2]).
// CHECK-LABEL: func.func @view_3
// CHECK: %[[C:.*]] = tensor.collapse_shape %{{.*}} {{\[}}[0, 1], [2]] : tensor<2x3x4xf32> into tensor<6x4xf32>
// CHECK: tensor.expand_shape %[[C]] {{\[}}[0], [1, 2]] output_shape [6, 2, 2] : tensor<6x4xf32> into tensor<6x2x2xf32>
func.func @view_3(%x: tensor<2x3x4xf32>) -> tensor<6x2x2xf32> {
  %r = "edge.view"(%x) {operandSegmentSizes = array<i32: 1, 0>, size = array<i64: 6, 2, 2>} : (tensor<2x3x4xf32>) -> tensor<6x2x2xf32>
  return %r : tensor<6x2x2xf32>
}

// -----

// ===== index-tensor =====
// index.Tensor's `Tensor?[]` indices become torch-mlir's !torch.list<optional<vtensor>> (None
// entries as torch.constant.none), which its index lowering takes (GPT-2/Llama mask indexing).

// CHECK-LABEL: func.func @index_tensor_0
// CHECK: %[[L:.*]] = torch.prim.ListConstruct %arg1, %arg2 : (!torch.vtensor<[1,1,1,1],si64>, !torch.vtensor<[1,1,1,7],si64>) -> !torch.list<optional<vtensor>>
// CHECK: torch.aten.index.Tensor %arg0, %[[L]] : !torch.vtensor<[1,7],i1>, !torch.list<optional<vtensor>> -> !torch.vtensor<[1,1,1,7],i1>
// LINALG-LABEL: func.func @index_tensor_0
// LINALG: linalg.generic
// LINALG: tensor.extract %arg0
func.func @index_tensor_0(%m: tensor<1x7xi1>, %b: tensor<1x1x1x1xi64>, %k: tensor<1x1x1x7xi64>) -> tensor<1x1x1x7xi1> {
  %r = "edge.index_tensor"(%m, %b, %k) {indices_mask = array<i1: true, true>, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<1x7xi1>, tensor<1x1x1x1xi64>, tensor<1x1x1x7xi64>) -> tensor<1x1x1x7xi1>
  return %r : tensor<1x1x1x7xi1>
}

// -----

// A None entry (x[:, idx]): the first dim is kept whole.
// CHECK-LABEL: func.func @index_tensor_1
// CHECK: %[[L1:.*]] = torch.prim.ListConstruct %none, %arg1 : (!torch.none, !torch.vtensor<[3],si64>) -> !torch.list<optional<vtensor>>
// CHECK: torch.aten.index.Tensor %arg0, %[[L1]] : !torch.vtensor<[4,5],f32>, !torch.list<optional<vtensor>> -> !torch.vtensor<[4,3],f32>
func.func @index_tensor_1(%x: tensor<4x5xf32>, %i: tensor<3xi64>) -> tensor<4x3xf32> {
  %r = "edge.index_tensor"(%x, %i) {indices_mask = array<i1: false, true>, operandSegmentSizes = array<i32: 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4x5xf32>, tensor<3xi64>) -> tensor<4x3xf32>
  return %r : tensor<4x3xf32>
}

// -----

// int32 indices are widened to int64 first (torch-mlir's lowering compares them with i64 bounds).
// CHECK-LABEL: func.func @index_tensor_2
// CHECK: %[[W:.*]] = torch.aten.to.dtype %arg1, %int4, {{.*}} -> !torch.vtensor<[3],si64>
// CHECK: %[[L2:.*]] = torch.prim.ListConstruct %[[W]] : (!torch.vtensor<[3],si64>) -> !torch.list<optional<vtensor>>
// CHECK: torch.aten.index.Tensor %arg0, %[[L2]]
// LINALG-LABEL: func.func @index_tensor_2
// LINALG: arith.extsi
func.func @index_tensor_2(%x: tensor<4x5xf32>, %i: tensor<3xi32>) -> tensor<3x5xf32> {
  %r = "edge.index_tensor"(%x, %i) {indices_mask = array<i1: true>, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4x5xf32>, tensor<3xi32>) -> tensor<3x5xf32>
  return %r : tensor<3x5xf32>
}

// -----

// ===== cumsum =====
// cumsum: torch-mlir's lowering is a tm_tensor.scan our bufferization does not take, so the cpu
// target expands it into a Hillis-Steele scan: ceil(log2 n) steps of x + (x shifted by 2^k along the
// dim, zero-filled), each a slice, a constant_pad_nd and an add. A bool/int32 input is converted to
// the int64 result first.

// n = 7 along dim 1: shifts 1, 2, 4.
// CHECK-LABEL: func.func @cumsum_0
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
// LINALG-LABEL: func.func @cumsum_0
// LINALG-NOT: tm_tensor
// LINALG: return
func.func @cumsum_0(%m: tensor<2x7xi1>) -> tensor<2x7xi64> {
  %r = "edge.cumsum"(%m) {dim = -1 : i64, dtype} : (tensor<2x7xi1>) -> tensor<2x7xi64>
  return %r : tensor<2x7xi64>
}

// -----

// Float along dim 0 of a [3, 5]: pads before the first dim; a size-1 dim needs no step.
// CHECK-LABEL: func.func @cumsum_1
// CHECK: torch.aten.slice.Tensor %arg0, %int0, %int0, %int2, %int1 : {{.*}} -> !torch.vtensor<[2,5],f32>
// CHECK: %[[PAD:.*]] = torch.prim.ListConstruct %int0, %int0, %int1, %int0 :
// CHECK: torch.aten.constant_pad_nd %{{.*}}, %[[PAD]], %float0.000000e00
// CHECK-COUNT-2: torch.aten.add.Tensor
// CHECK-LABEL: func.func @cumsum_2
// CHECK-NOT: torch.aten.add.Tensor
// CHECK: return %arg0
func.func @cumsum_1(%x: tensor<3x5xf32>) -> tensor<3x5xf32> {
  %r = "edge.cumsum"(%x) {dim = 0 : i64, dtype} : (tensor<3x5xf32>) -> tensor<3x5xf32>
  return %r : tensor<3x5xf32>
}

// -----

func.func @cumsum_2(%x: tensor<4x1xf32>) -> tensor<4x1xf32> {
  %r = "edge.cumsum"(%x) {dim = 1 : i64, dtype} : (tensor<4x1xf32>) -> tensor<4x1xf32>
  return %r : tensor<4x1xf32>
}

// -----

// Along a dynamic dim (upper bound 6: shifts 1, 2, 4): the shift pads x first and keeps its first
// `size` elements, the run-time size; right at every size (found by the compiler fuzzer: the steps
// counted the dynamic sentinel, none ran, and x came back as its own cumsum).
// CHECK-LABEL: func.func @cumsum_3
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
// LINALG-LABEL: func.func @cumsum_3
// LINALG-NOT: tm_tensor
// LINALG: return
func.func @cumsum_3(%x: tensor<2x?xf32> {etc.dim_bounds = array<i64: 2, 2, 1, 6>}) -> tensor<2x?xf32> {
  %r = "edge.cumsum"(%x) {dim = 1 : i64, dtype, etc.upper_bounds = array<i64: 2, 6>} : (tensor<2x?xf32>) -> tensor<2x?xf32>
  return %r : tensor<2x?xf32>
}

// -----

// ===== gelu-tanh =====
// gelu(approximate="tanh") goes to torch as its formula, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
// with sqrt(2/pi) to f64 precision: torch-mlir's own lowering used 0.797724 and was 5e-5 off ATen.
// The exact GELU stays one op.

// CHECK-LABEL: func.func @gelu_0
// CHECK: %[[X2:.*]] = torch.aten.mul.Tensor %arg0, %arg0
// CHECK: %[[X3:.*]] = torch.aten.mul.Tensor %[[X2]], %arg0
// CHECK: %[[IN:.*]] = torch.aten.add.Tensor %arg0, %[[X3]], %float4.471500e-02
// CHECK: %[[C:.*]] = torch.constant.float 0.79788456080286541
// CHECK: %[[S:.*]] = torch.aten.mul.Scalar %[[IN]], %[[C]]
// CHECK: %[[T:.*]] = torch.aten.tanh %[[S]]
// CHECK: %[[P:.*]] = torch.aten.add.Scalar %[[T]], %float1.000000e00, %int1
// CHECK: %[[H:.*]] = torch.aten.mul.Scalar %arg0, %float5.000000e-01
// CHECK: %[[G:.*]] = torch.aten.mul.Tensor %[[H]], %[[P]]
// CHECK-NOT: torch.aten.gelu
// CHECK: return %[[G]]
func.func @gelu_0(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %r = "edge.gelu"(%x) {approximate = "tanh"} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}

// -----

// CHECK-LABEL: func.func @gelu_1
// CHECK: torch.aten.gelu %arg0, %str
// CHECK-NOT: torch.aten.tanh
func.func @gelu_1(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %r = "edge.gelu"(%x) {approximate = "none"} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}

// -----

// ===== as-strided =====
// as_strided (over the input's contiguous storage) has no torch-mlir lowering; with static sizes and
// strides the cpu target expands it: non-overlapping dims (each fitting inside the next larger
// stride, which it divides) become a view chain (flatten, slice at the offset, reshape into a box,
// slices, permute back to the output's order, broadcast of stride-0 dims); overlapping ones (sliding
// windows) a gather with a constant index tensor.

// A 4x4 window partition of [1, 8, 12, 3]: box [2, 4, 3, 4, 3, 1] (strides 144/36/12/3/1), no
// slicing needed, permuted to the output's (window row, window col, row, col, channel) order.
// CHECK-LABEL: func.func @as_strided_0
// CHECK: %[[F:.*]] = torch_c.from_builtin_tensor %{{.*}} : {{.*}} -> !torch.vtensor<[288],f32>
// CHECK: %[[B:.*]] = torch_c.from_builtin_tensor %{{.*}} : {{.*}} -> !torch.vtensor<[2,4,3,4,3,1],f32>
// CHECK-NOT: torch.aten.slice.Tensor
// CHECK: %[[V:.*]] = torch_c.from_builtin_tensor %{{.*}} : {{.*}} -> !torch.vtensor<[2,4,3,4,3],f32>
// CHECK: %[[P:.*]] = torch.prim.ListConstruct %int0, %int2, %int1, %int3, %int4
// CHECK: torch.aten.permute %[[V]], %[[P]] {{.*}} -> !torch.vtensor<[2,3,4,4,3],f32>
// CHECK-NOT: index_select
// LINALG-LABEL: func.func @as_strided_0
// LINALG-NOT: tensor.extract %
func.func @as_strided_0(%x: tensor<1x8x12x3xf32>) -> tensor<2x3x4x4x3xf32> {
  %r = "edge.as_strided"(%x) {operandSegmentSizes = array<i32: 1, 0, 0, 0>, size = array<i64: 2, 3, 4, 4, 3>, storage_offset, stride = array<i64: 144, 12, 36, 3, 1>} : (tensor<1x8x12x3xf32>) -> tensor<2x3x4x4x3xf32>
  return %r : tensor<2x3x4x4x3xf32>
}

// -----

// Every other row and every other column of [9, 11] from offset 1: the box [5, 11, 2] (rows 22
// apart, columns 2 apart) sliced to [5, 6, 1]; it runs past the storage's 99 elements, which are
// padded (nothing reads the padding).
// CHECK-LABEL: func.func @as_strided_1
// CHECK: torch.aten.constant_pad_nd %{{.*}} -> !torch.vtensor<[111],f32>
// CHECK: torch.aten.slice.Tensor %{{.*}}, %int0, %int1, %int111, %int1 : {{.*}} -> !torch.vtensor<[110],f32>
// CHECK: torch_c.from_builtin_tensor %{{.*}} -> !torch.vtensor<[5,11,2],f32>
// CHECK: torch.aten.slice.Tensor {{.*}} -> !torch.vtensor<[5,6,2],f32>
// CHECK: torch.aten.slice.Tensor {{.*}} -> !torch.vtensor<[5,6,1],f32>
// CHECK: torch_c.from_builtin_tensor {{.*}} -> !torch.vtensor<[5,6],f32>
func.func @as_strided_1(%x: tensor<9x11xf32>) -> tensor<5x6xf32> {
  %r = "edge.as_strided"(%x) {operandSegmentSizes = array<i32: 1, 0, 0, 0>, size = array<i64: 5, 6>, storage_offset = 1 : i64, stride = array<i64: 22, 2>} : (tensor<9x11xf32>) -> tensor<5x6xf32>
  return %r : tensor<5x6xf32>
}

// -----

// Overlapping windows (size 5, step 2): a gather with a constant index tensor.
// CHECK-LABEL: func.func @as_strided_2
// CHECK: %[[I:.*]] = torch.vtensor.literal(dense<{{\[}}0, 1, 2, 3, 4, 2, 3, 4, 5, 6, 4{{.*}}> : tensor<35xsi64>) : !torch.vtensor<[35],si64>
// CHECK: torch.aten.index_select %{{.*}}, %int0, %[[I]] {{.*}} -> !torch.vtensor<[35],f32>
// CHECK: torch_c.from_builtin_tensor {{.*}} -> !torch.vtensor<[7,5],f32>
// LINALG-LABEL: func.func @as_strided_2
// LINALG: arith.constant dense<{{.*}}> : tensor<35xi64>
func.func @as_strided_2(%x: tensor<17xf32>) -> tensor<7x5xf32> {
  %r = "edge.as_strided"(%x) {operandSegmentSizes = array<i32: 1, 0, 0, 0>, size = array<i64: 7, 5>, storage_offset, stride = array<i64: 2, 1>} : (tensor<17xf32>) -> tensor<7x5xf32>
  return %r : tensor<7x5xf32>
}

// -----

// A stride-0 dim broadcasts (expand); a size-1 dim takes any stride.
// CHECK-LABEL: func.func @as_strided_3
// CHECK: torch_c.from_builtin_tensor {{.*}} -> !torch.vtensor<[1,1,6],f32>
// CHECK: torch.aten.expand {{.*}} -> !torch.vtensor<[3,1,6],f32>
func.func @as_strided_3(%x: tensor<4x6xf32>) -> tensor<3x1x6xf32> {
  %r = "edge.as_strided"(%x) {operandSegmentSizes = array<i32: 1, 0, 0, 0>, size = array<i64: 3, 1, 6>, storage_offset = 6 : i64, stride = array<i64: 0, 999, 1>} : (tensor<4x6xf32>) -> tensor<3x1x6xf32>
  return %r : tensor<3x1x6xf32>
}

// -----

// Swin's pooler (AdaptiveAvgPool1d decomposed): [1, 24, 1, 1] with strides (24, 1, 24, 24), the
// input itself: views only, which fold away in linalg.
// CHECK-LABEL: func.func @as_strided_4
// CHECK-NOT: torch.aten.slice.Tensor
// CHECK-NOT: torch.aten.permute
// CHECK-NOT: torch.aten.index_select
// CHECK: return
// LINALG-LABEL: func.func @as_strided_4
// LINALG-NOT: linalg.generic
// LINALG: return
func.func @as_strided_4(%x: tensor<1x24x1x1xf32>) -> tensor<1x24x1x1xf32> {
  %r = "edge.as_strided"(%x) {operandSegmentSizes = array<i32: 1, 0, 0, 0>, size = array<i64: 1, 24, 1, 1>, storage_offset, stride = array<i64: 24, 1, 24, 24>} : (tensor<1x24x1x1xf32>) -> tensor<1x24x1x1xf32>
  return %r : tensor<1x24x1x1xf32>
}

// -----

// ===== index-put =====
// index_put: torch-mlir's lowering is a tm_tensor.scatter our bufferization does not take, so the
// cpu target expands it as a loop over the K index tuples (torch.prim.Loop -> scf.for), each
// writing its row of values into x viewed as [pre, P, post] (P indexed positions; adjacent
// indexed dims need no copy for that), the values viewed as [pre, K, post], the indices
// linearized; accumulate adds the row to what is there. A position named twice takes its last
// write, as the loop runs in order.

// A KV-cache update cache[:, :, pos] = k: values [2, 3, 4] broadcast to [1, 2, 3, 4]; the cache is
// written in its own layout ([2, 16, 4], no permute), 3 new positions, one row each.
// CHECK-LABEL: func.func @index_put_0
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
// LINALG-LABEL: func.func @index_put_0
// LINALG-NOT: tm_tensor
// LINALG: %[[OUT:.*]] = scf.for {{.*}} iter_args(%[[ACC:.*]] = %collapsed) -> (tensor<2x16x4xf32>)
// LINALG: %[[P:.*]] = tensor.extract
// LINALG: tensor.insert_slice %{{.*}} into %[[ACC]][0, %{{.*}}, 0] [2, 1, 4] [1, 1, 1]
// LINALG: tensor.expand_shape %[[OUT]]
// LINALG: return
func.func @index_put_0(%k: tensor<1x2x16x4xf32>, %pos: tensor<3xi64>, %x: tensor<2x3x4xf32>) -> tensor<1x2x16x4xf32> {
  %1 = "edge.index_put"(%k, %pos, %x) {accumulate = false, indices_mask = array<i1: false, false, true>, operandSegmentSizes = array<i32: 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1>} : (tensor<1x2x16x4xf32>, tensor<3xi64>, tensor<2x3x4xf32>) -> tensor<1x2x16x4xf32>
  return %1 : tensor<1x2x16x4xf32>
}

// -----

// accumulate=True: each row is added to the one at its position.
// CHECK-LABEL: func.func @index_put_1
// CHECK: torch.prim.Loop %int3, %true, init(%{{.*}})
// CHECK: %[[OLD:.*]] = torch.aten.slice.Tensor %[[ACC:arg[0-9]+]], {{.*}} -> !torch.vtensor<[1,1,3],f32>
// CHECK: %[[SUM:.*]] = torch.aten.add.Tensor %[[OLD]], {{.*}} -> !torch.vtensor<[1,1,3],f32>
// CHECK: torch.aten.slice_scatter %[[ACC]], %[[SUM]],
// LINALG-LABEL: func.func @index_put_1
// LINALG: scf.for
// LINALG: arith.addf
// LINALG: tensor.insert_slice
func.func @index_put_1(%a: tensor<5x3xf32>, %i: tensor<3xi64>, %v: tensor<3x3xf32>) -> tensor<5x3xf32> {
  %0 = "edge.index_put"(%a, %i, %v) {accumulate = true, indices_mask = array<i1: true>, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1>} : (tensor<5x3xf32>, tensor<3xi64>, tensor<3x3xf32>) -> tensor<5x3xf32>
  return %0 : tensor<5x3xf32>
}
