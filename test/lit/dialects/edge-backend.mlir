// RUN: etc-opt %s | filecheck %s
// edge ops and a backend.delegate round-trip; pure ops are cleaned by upstream cse.
// RUN: etc-opt %s --pass-pipeline='builtin.module(cse)' | filecheck %s --check-prefix=CSE

// CHECK-LABEL: func.func @forward
// CSE-LABEL: func.func @forward
func.func @forward(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  // CHECK-COUNT-2: "edge.relu"
  // CSE-COUNT-1: "edge.relu"
  // CSE-NOT: "edge.relu"
  %0 = "edge.relu"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "edge.relu"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  // Inputs and outputs of different types: each sits in its own numbered slot.
  // CHECK: "backend.delegate"(%{{.*}}, %{{.*}}) {backend_id = "cpu", callee = @delegate_0, compile_specs = {num_threads = "1"}
  // CHECK-SAME: (tensor<4xf32>, tensor<2xi64>) -> (tensor<4xf32>, tensor<2xi64>)
  %idx = "arith.constant"() {value = dense<[1, 2]> : tensor<2xi64>} : () -> tensor<2xi64>
  %2:2 = "backend.delegate"(%0, %idx) {backend_id = "cpu", callee = @delegate_0, compile_specs = {num_threads = "1"}, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>, tensor<2xi64>) -> (tensor<4xf32>, tensor<2xi64>)
  return %1, %2#0 : tensor<4xf32>, tensor<4xf32>
}

func.func private @delegate_0(%x: tensor<4xf32>, %i: tensor<2xi64>) -> (tensor<4xf32>, tensor<2xi64>) {
  %0 = "edge.neg"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0, %i : tensor<4xf32>, tensor<2xi64>
}
