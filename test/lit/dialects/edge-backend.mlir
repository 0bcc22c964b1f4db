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
  // CHECK: "backend.delegate"(%{{.*}}) {backend_id = "cpu", callee = @delegate_0, compile_specs = {num_threads = "1"}
  %2 = "backend.delegate"(%0) {backend_id = "cpu", callee = @delegate_0, compile_specs = {num_threads = "1"}, operandSegmentSizes = array<i32: 1>, resultSegmentSizes = array<i32: 1>} : (tensor<4xf32>) -> tensor<4xf32>
  return %1, %2 : tensor<4xf32>, tensor<4xf32>
}

func.func private @delegate_0(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "edge.neg"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
