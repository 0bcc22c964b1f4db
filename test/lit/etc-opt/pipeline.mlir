// A pipeline mixing etc's Python passes with upstream ones, nested and not; the IR after each pass.
// RUN: etc-opt %s --pass-pipeline='builtin.module(etc-dce, canonicalize, func.func(cse, etc-canonicalize-aten))' | filecheck %s
// RUN: etc-opt %s --etc-dce --canonicalize --cse --etc-canonicalize-aten | filecheck %s
// RUN: etc-opt %s --pass-pipeline='builtin.module(etc-dce, canonicalize, func.func(cse, etc-canonicalize-aten))' --mlir-print-ir-after-all --mlir-timing -o /dev/null 2>&1 | filecheck %s --check-prefix=DUMP
// RUN: etc-opt %s --pass-pipeline='builtin.module(func.func())' | filecheck %s --check-prefix=EMPTY
// RUN: etc-opt %s --etc-dce --etc-memory-planning=alignment=64 --canonicalize=max-iterations=3 --dump-pass-pipeline -o /dev/null 2>&1 | filecheck %s --check-prefix=PIPELINE
// PIPELINE: builtin.module(etc-dce, etc-memory-planning{algorithm=greedy alignment=64 alloc-graph-input=false alloc-graph-output=true report=false}, canonicalize{max-iterations=3})

// DUMP: // -----// IR Dump After etc-dce //----- //
// DUMP-NOT: aten.neg
// DUMP: "aten.add_tensor"
// DUMP: // -----// IR Dump After canonicalize //----- //
// DUMP-NOT: arith.addi
// DUMP: // -----// IR Dump After cse ('func.func' operation) //----- //
// DUMP: // -----// IR Dump After etc-canonicalize-aten ('func.func' operation) //----- //
// DUMP-NOT: aten.view
// DUMP: return
// --mlir-timing: each pass's wall time in pipeline order, the verifier's, the total (mlir-opt's report).
// DUMP: ... Execution time report ...
// DUMP: Total Execution Time: {{[0-9.]+}} seconds
// DUMP: ----Wall Time----  ----Name----
// DUMP-NEXT: {{[0-9.]+}} ({{ *[0-9.]+}}%)  etc-dce
// DUMP-NEXT: {{[0-9.]+}} ({{ *[0-9.]+}}%)  canonicalize
// DUMP-NEXT: {{[0-9.]+}} ({{ *[0-9.]+}}%)  cse ('func.func' operation)
// DUMP-NEXT: {{[0-9.]+}} ({{ *[0-9.]+}}%)  etc-canonicalize-aten ('func.func' operation)
// DUMP-NEXT: {{[0-9.]+}} ({{ *[0-9.]+}}%)  (verifier)
// DUMP-NEXT: {{[0-9.]+}} (100.0%)  Total

// CHECK-LABEL: func.func @forward
func.func @forward(%x: tensor<4x8xf32>, %i: i32) -> (tensor<4x8xf32>, i32) {
  // CHECK-NOT: aten.neg
  %dead = "aten.neg"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  // canonicalize folds x + 0.
  // CHECK-NOT: arith.addi
  %zero = arith.constant 0 : i32
  %j = arith.addi %i, %zero : i32
  // cse merges the two adds, etc-canonicalize-aten drops the identity view.
  // CHECK: %[[A:.+]] = "aten.add_tensor"(%arg0, %arg0)
  // CHECK-NOT: aten.add_tensor
  // CHECK-NOT: aten.view
  // CHECK: %[[M:.+]] = "aten.mul_tensor"(%[[A]], %[[A]])
  // CHECK: return %[[M]], %arg1
  %0 = "aten.add_tensor"(%x, %x) {alpha = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = "aten.add_tensor"(%x, %x) {alpha = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = "aten.view"(%1) {size = array<i64: 4, 8>} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = "aten.mul_tensor"(%0, %2) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %3, %j : tensor<4x8xf32>, i32
}
// EMPTY: "aten.neg"
