// RUN: etc-opt %s --etc-convert-aten-to-edge | filecheck %s
// Ops inside control-flow regions (torch.cond -> scf.if, torch.while_loop -> scf.while) are
// converted like top-level ones; the regions, their yields and the predicate stay as they are.

// CHECK-LABEL: func.func @forward
func.func @forward(%x: tensor<3xf32>, %limit: tensor<f32>) -> (tensor<3xf32>, tensor<3xf32>) {
  // CHECK: %[[S:.+]] = "edge.sum_dim_intlist"
  %s = "aten.sum_dim_intlist"(%x) {dim = array<i64>, dtype, keepdim = false} : (tensor<3xf32>) -> tensor<f32>
  // CHECK: %[[GT:.+]] = "edge.gt_scalar"(%[[S]])
  %gt = "aten.gt_scalar"(%s) {operandSegmentSizes = array<i32: 1, 0>, other = 0 : i64} : (tensor<f32>) -> tensor<i1>
  // CHECK: %[[P:.+]] = tensor.extract %[[GT]][]
  %p = tensor.extract %gt[] : tensor<i1>
  // CHECK: scf.if %[[P]] -> (tensor<3xf32>) {
  %r = scf.if %p -> (tensor<3xf32>) {
    // CHECK-NEXT: %[[T:.+]] = "edge.add_scalar"
    %t = "aten.add_scalar"(%x) {alpha = 1 : i64, operandSegmentSizes = array<i32: 1, 0, 0>, other = 1 : i64} : (tensor<3xf32>) -> tensor<3xf32>
    // CHECK-NEXT: scf.yield %[[T]]
    scf.yield %t : tensor<3xf32>
  } else {
    // CHECK: "edge.sub_scalar"
    %f = "aten.sub_scalar"(%x) {alpha = 1 : i64, operandSegmentSizes = array<i32: 1, 0, 0>, other = 1 : i64} : (tensor<3xf32>) -> tensor<3xf32>
    scf.yield %f : tensor<3xf32>
  }
  // CHECK: scf.while
  %w = scf.while (%y = %x) : (tensor<3xf32>) -> tensor<3xf32> {
    // CHECK: "edge.sum_dim_intlist"
    %ys = "aten.sum_dim_intlist"(%y) {dim = array<i64>, dtype, keepdim = false} : (tensor<3xf32>) -> tensor<f32>
    // CHECK: "edge.lt_tensor"
    %lt = "aten.lt_tensor"(%ys, %limit) : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %c = tensor.extract %lt[] : tensor<i1>
    scf.condition(%c) %y : tensor<3xf32>
  } do {
  ^bb0(%y: tensor<3xf32>):
    // CHECK: "edge.mul_scalar"
    %m = "aten.mul_scalar"(%y) {operandSegmentSizes = array<i32: 1, 0>, other = 2 : i64} : (tensor<3xf32>) -> tensor<3xf32>
    scf.yield %m : tensor<3xf32>
  }
  // CHECK-NOT: "aten.
  return %r, %w : tensor<3xf32>, tensor<3xf32>
}
