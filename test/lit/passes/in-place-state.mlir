// etc-in-place-state marks a buffer update (global_load -> index_put -> global_store) that can write
// the buffer's own storage, and leaves every case where the old value or the buffer could be seen.
// RUN: etc-opt %s --split-input-file --etc-in-place-state | filecheck %s
// RUN: etc-opt %s --split-input-file --etc-in-place-state --etc-memory-planning | filecheck %s --check-prefix=PLAN

ml_program.global private mutable @cache(#ml_program.extern : tensor<4x8xf32>) : tensor<4x8xf32>

// CHECK-LABEL: func.func @update
// PLAN-LABEL: func.func @update
func.func @update(%pos: tensor<1xi64>, %row: tensor<1x8xf32>) -> tensor<4x8xf32> {
  %old = ml_program.global_load @cache : tensor<4x8xf32>
  // CHECK: "edge.index_put"{{.*}}etc.in_place_state = [@cache]
  // The planner leaves the new value to the buffer's storage: only the sigmoid is planned.
  // PLAN: "edge.index_put"{{.*}}etc.alloc = [unit]
  %new = "edge.index_put"(%old, %pos, %row) {accumulate = false, indices_mask = array<i1: true>, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1>} : (tensor<4x8xf32>, tensor<1xi64>, tensor<1x8xf32>) -> tensor<4x8xf32>
  // PLAN: "edge.sigmoid"{{.*}}etc.alloc = [array<i64: 1, 0, 128>]
  %out = "edge.sigmoid"(%new) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  ml_program.global_store @cache = %new : tensor<4x8xf32>
  return %out : tensor<4x8xf32>
}

// -----

ml_program.global private mutable @cache(#ml_program.extern : tensor<4x8xf32>) : tensor<4x8xf32>

// The old value is read again after the update: the buffer must keep it, so no mark.
// CHECK-LABEL: func.func @old_value_read_later
func.func @old_value_read_later(%pos: tensor<1xi64>, %row: tensor<1x8xf32>) -> tensor<4x8xf32> {
  %old = ml_program.global_load @cache : tensor<4x8xf32>
  // CHECK-NOT: etc.in_place_state
  %new = "edge.index_put"(%old, %pos, %row) {accumulate = false, indices_mask = array<i1: true>, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1>} : (tensor<4x8xf32>, tensor<1xi64>, tensor<1x8xf32>) -> tensor<4x8xf32>
  ml_program.global_store @cache = %new : tensor<4x8xf32>
  %sum = "edge.add_tensor"(%old, %new) {alpha = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %sum : tensor<4x8xf32>
}

// -----

ml_program.global private mutable @cache(#ml_program.extern : tensor<4x8xf32>) : tensor<4x8xf32>

// The updated value is the method's output: it keeps its own storage (no mark).
// CHECK-LABEL: func.func @returned
func.func @returned(%pos: tensor<1xi64>, %row: tensor<1x8xf32>) -> tensor<4x8xf32> {
  %old = ml_program.global_load @cache : tensor<4x8xf32>
  // CHECK-NOT: etc.in_place_state
  %new = "edge.index_put"(%old, %pos, %row) {accumulate = false, indices_mask = array<i1: true>, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1>} : (tensor<4x8xf32>, tensor<1xi64>, tensor<1x8xf32>) -> tensor<4x8xf32>
  ml_program.global_store @cache = %new : tensor<4x8xf32>
  return %new : tensor<4x8xf32>
}

// -----

ml_program.global private mutable @cache(#ml_program.extern : tensor<4x8xf32>) : tensor<4x8xf32>

// The buffer is loaded as the update's `values`, not its `self`; and another op computes the
// stored value: neither is an in-place update.
// CHECK-LABEL: func.func @not_self
func.func @not_self(%pos: tensor<1xi64>, %base: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %old = ml_program.global_load @cache : tensor<4x8xf32>
  // CHECK-NOT: etc.in_place_state
  %new = "edge.index_put"(%base, %pos, %old) {accumulate = false, indices_mask = array<i1: true>, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1>} : (tensor<4x8xf32>, tensor<1xi64>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %twice = "edge.add_tensor"(%new, %new) {alpha = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  ml_program.global_store @cache = %twice : tensor<4x8xf32>
  return %new : tensor<4x8xf32>
}

// -----

ml_program.global private mutable @cache(#ml_program.extern : tensor<4x8xf32>) : tensor<4x8xf32>

// A store inside a branch: the buffer is written only on one path, so the update keeps its copy.
// CHECK-LABEL: func.func @store_in_branch
func.func @store_in_branch(%pos: tensor<1xi64>, %row: tensor<1x8xf32>, %c: i1) -> tensor<1x8xf32> {
  %old = ml_program.global_load @cache : tensor<4x8xf32>
  // CHECK-NOT: etc.in_place_state
  %new = "edge.index_put"(%old, %pos, %row) {accumulate = false, indices_mask = array<i1: true>, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1>} : (tensor<4x8xf32>, tensor<1xi64>, tensor<1x8xf32>) -> tensor<4x8xf32>
  scf.if %c {
    ml_program.global_store @cache = %new : tensor<4x8xf32>
  }
  return %row : tensor<1x8xf32>
}
