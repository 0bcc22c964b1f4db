// Memory planning over structured control flow (torch.cond -> scf.if, torch.while_loop -> scf.while):
// ops are scheduled in execution order with nested ones in place; an scf.if result shares the
// storage of the value each branch computes (only one branch runs); a value read inside a loop
// (%0 here) stays live to the loop's end, so nothing inside the loop reuses its bytes; the loop's
// carry has its own storage for the whole loop.
// RUN: etc-opt %s --etc-memory-planning=report 2>&1 | filecheck %s

// CHECK: forward       1             64           64          1.000            8
// CHECK-LABEL: func.func @forward
// CHECK: "edge.exp"{{.*}}etc.alloc = [array<i64: 1, 0, 16>]
// CHECK: scf.if
// CHECK-NEXT: "edge.neg"{{.*}}etc.alloc = [array<i64: 1, [[R:[0-9]+]], 16>]
// CHECK: "edge.tanh"{{.*}}etc.alloc = [array<i64: 1, [[R]], 16>]
// CHECK: } {etc.alloc = [array<i64: 1, [[R]], 16>]}
// CHECK: scf.while
// CHECK-NEXT: "edge.sum_dim_intlist"{{.*}}etc.alloc = [array<i64: 1, [[R]], 16>]
// CHECK-NEXT: "edge.lt_tensor"{{.*}}etc.alloc = [array<i64: 1, 48, 16>]
// CHECK: "edge.mul_tensor"{{.*}}etc.alloc = [array<i64: 1, 16, 16>]
// CHECK-NEXT: "edge.sin"{{.*}}etc.alloc = [array<i64: 1, 48, 16>]
// CHECK: } attributes {etc.alloc = [array<i64: 1, 32, 16>]}
// CHECK-NEXT: "edge.cos"{{.*}}etc.alloc = [array<i64: 1, 0, 16>]
func.func @forward(%x: tensor<4xf32>, %p: tensor<i1>) -> (tensor<4xf32>, tensor<4xf32>) {
  %a = "edge.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %c = tensor.extract %p[] : tensor<i1>
  %r = scf.if %c -> (tensor<4xf32>) {
    %t = "edge.neg"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    scf.yield %t : tensor<4xf32>
  } else {
    %f = "edge.tanh"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    scf.yield %f : tensor<4xf32>
  }
  %w = scf.while (%y = %r) : (tensor<4xf32>) -> tensor<4xf32> {
    %s = "edge.sum_dim_intlist"(%y) {dim = array<i64>, dtype, keepdim = false} : (tensor<4xf32>) -> tensor<f32>
    %lt = "edge.lt_tensor"(%s, %s) : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %e = tensor.extract %lt[] : tensor<i1>
    scf.condition(%e) %y : tensor<4xf32>
  } do {
  ^bb0(%y: tensor<4xf32>):
    %m = "edge.mul_tensor"(%y, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %n = "edge.sin"(%m) : (tensor<4xf32>) -> tensor<4xf32>
    scf.yield %n : tensor<4xf32>
  }
  %o = "edge.cos"(%w) : (tensor<4xf32>) -> tensor<4xf32>
  return %o, %w : tensor<4xf32>, tensor<4xf32>
}
