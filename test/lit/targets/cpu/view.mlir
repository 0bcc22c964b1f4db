// A view is a row-major reshape: the cpu target lowers it to tensor.collapse_shape /
// tensor.expand_shape on builtin tensors itself (lower.reshape), with groups that hold at every
// run-time size, instead of torch-mlir's aten.view lowering, which with two dynamic dims guessed
// [b, t, 64] -> [b * t, 64] to be a cast to [b, 1, 64] (wrong for every t > 1).
// RUN: %PYTHON -m etc.targets.cpu.lower %s --stage torch | filecheck %s

// Two dynamic dims merged: the static 64 matches from the right, the rest is one group.
// CHECK-LABEL: func.func @delegate_cpu_0
// CHECK: %[[X:.*]] = torch_c.to_builtin_tensor %arg0 : !torch.vtensor<[?,?,64],f32> -> tensor<?x?x64xf32>
// CHECK-NOT: tensor.cast
// CHECK: tensor.collapse_shape %[[X]] {{\[}}[0, 1], [2]] : tensor<?x?x64xf32> into tensor<?x64xf32>
// CHECK-NOT: tensor.expand_shape
func.func private @delegate_cpu_0(%x: tensor<?x?x64xf32> {etc.dim_bounds = array<i64: 1, 8, 1, 64, 64, 64>}) -> tensor<?x64xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %b = tensor.dim %x, %c0 : tensor<?x?x64xf32>
  %t = tensor.dim %x, %c1 : tensor<?x?x64xf32>
  %bt = arith.muli %b, %t : index
  %r = "edge.view"(%x, %bt) {operandSegmentSizes = array<i32: 1, 1>, size = array<i64: -9223372036854775808, 64>} : (tensor<?x?x64xf32>, index) -> tensor<?x64xf32>
  return %r : tensor<?x64xf32>
}

// Split again: the result's dynamic sizes are the view's own size values.
// CHECK-LABEL: func.func @delegate_cpu_1
// CHECK: %[[B:.*]] = torch.aten.size.int %arg0, %int0
// CHECK: %[[T:.*]] = torch.aten.size.int %arg0, %int1
// CHECK: %[[Y:.*]] = torch_c.to_builtin_tensor %arg1
// CHECK-DAG: %[[B64:.*]] = torch_c.to_i64 %[[B]]
// CHECK-DAG: %[[T64:.*]] = torch_c.to_i64 %[[T]]
// CHECK-DAG: %[[BI:.*]] = arith.index_cast %[[B64]] : i64 to index
// CHECK-DAG: %[[TI:.*]] = arith.index_cast %[[T64]] : i64 to index
// CHECK: tensor.expand_shape %[[Y]] {{\[}}[0, 1], [2]] output_shape [%[[BI]], %[[TI]], 128] : tensor<?x128xf32> into tensor<?x?x128xf32>
func.func private @delegate_cpu_1(%x: tensor<?x?x64xf32> {etc.dim_bounds = array<i64: 1, 8, 1, 64, 64, 64>}, %y: tensor<?x128xf32> {etc.dim_bounds = array<i64: 1, 512, 128, 128>}) -> tensor<?x?x128xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %b = tensor.dim %x, %c0 : tensor<?x?x64xf32>
  %t = tensor.dim %x, %c1 : tensor<?x?x64xf32>
  %r = "edge.view"(%y, %b, %t) {operandSegmentSizes = array<i32: 1, 2>, size = array<i64: -9223372036854775808, -9223372036854775808, 128>} : (tensor<?x128xf32>, index, index) -> tensor<?x?x128xf32>
  return %r : tensor<?x?x128xf32>
}

// No group can be proven ([n, 6] -> [m, 4]): collapsed to one dim and expanded again, which is
// right whatever n is.
// CHECK-LABEL: func.func @delegate_cpu_2
// CHECK: %[[F:.*]] = tensor.collapse_shape %{{.*}} {{\[}}[0, 1]] : tensor<?x6xf32> into tensor<?xf32>
// CHECK: tensor.expand_shape %[[F]] {{\[}}[0, 1]] output_shape [%{{.*}}, 4] : tensor<?xf32> into tensor<?x4xf32>
func.func private @delegate_cpu_2(%x: tensor<?x6xf32> {etc.dim_bounds = array<i64: 2, 8, 6, 6>}) -> tensor<?x4xf32> {
  %c0 = arith.constant 0 : index
  %c3 = arith.constant 3 : index
  %c2 = arith.constant 2 : index
  %n = tensor.dim %x, %c0 : tensor<?x6xf32>
  %n3 = arith.muli %n, %c3 : index
  %m = arith.floordivsi %n3, %c2 : index
  %r = "edge.view"(%x, %m) {operandSegmentSizes = array<i32: 1, 1>, size = array<i64: -9223372036854775808, 4>} : (tensor<?x6xf32>, index) -> tensor<?x4xf32>
  return %r : tensor<?x4xf32>
}

// Static sizes: the finest groups ([2, 3, 4] -> [6, 2, 2]: [0, 1] -> [0], [2] -> [1, 2]).
// CHECK-LABEL: func.func @delegate_cpu_3
// CHECK: %[[C:.*]] = tensor.collapse_shape %{{.*}} {{\[}}[0, 1], [2]] : tensor<2x3x4xf32> into tensor<6x4xf32>
// CHECK: tensor.expand_shape %[[C]] {{\[}}[0], [1, 2]] output_shape [6, 2, 2] : tensor<6x4xf32> into tensor<6x2x2xf32>
func.func private @delegate_cpu_3(%x: tensor<2x3x4xf32>) -> tensor<6x2x2xf32> {
  %r = "edge.view"(%x) {operandSegmentSizes = array<i32: 1, 0>, size = array<i64: 6, 2, 2>} : (tensor<2x3x4xf32>) -> tensor<6x2x2xf32>
  return %r : tensor<6x2x2xf32>
}
