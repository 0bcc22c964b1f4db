// The planner's attributes on a small residual graph: a constant (not planned), a view
// (shares its input's bytes), a permute (a copy), and a value read again later.
// RUN: etc-opt %s --etc-memory-planning=report 2>&1 | filecheck %s
// RUN: etc-opt %s --pass-pipeline='builtin.module(etc-memory-planning{algorithm=naive alloc-graph-input=true alloc-graph-output=false report})' 2>&1 | filecheck %s --check-prefix=NAIVE
// The report is written to stderr while the pass runs, so it comes before the module.

ml_program.global private @weight(#ml_program.extern : tensor<4x8xf32>) : tensor<4x8xf32>

// CHECK-LABEL: func.func @forward
// CHECK-SAME: %arg0: tensor<4x8xf32>)
// CHECK-SAME: etc.buffer_sizes = array<i64: 0, 384>, etc.lower_bounds = array<i64: 0, 384>
// NAIVE-LABEL: func.func @forward
// NAIVE-SAME: %arg0: tensor<4x8xf32> {etc.alloc = array<i64: 1, 0, 128>}
// NAIVE-SAME: etc.buffer_sizes = array<i64: 0, 512>, etc.lower_bounds = array<i64: 0, 384>
func.func @forward(%x: tensor<4x8xf32>) -> tensor<8x4xf32> {
  // CHECK: ml_program.global_load_const @weight {{.*}}{etc.alloc = [unit]}
  %w = ml_program.global_load_const @weight : tensor<4x8xf32>
  // CHECK: "edge.mul_tensor"{{.*}}etc.alloc = [array<i64: 1, [[MUL:[0-9]+]], 128>]
  // NAIVE: "edge.mul_tensor"{{.*}}etc.alloc = [array<i64: 1, 128, 128>]
  %0 = "edge.mul_tensor"(%x, %w) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: "edge.view"{{.*}}etc.alloc = [array<i64: 1, [[MUL]], 128>]
  %1 = "edge.view"(%0) {size = array<i64: 32>} : (tensor<4x8xf32>) -> tensor<32xf32>
  // CHECK: "edge.sigmoid"{{.*}}etc.alloc = [array<i64: 1, {{[0-9]+}}, 128>]
  %2 = "edge.sigmoid"(%1) : (tensor<32xf32>) -> tensor<32xf32>
  %3 = "edge.view"(%2) {size = array<i64: 4, 8>} : (tensor<32xf32>) -> tensor<4x8xf32>
  %4 = "edge.add_tensor"(%3, %0) {alpha = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: "edge.permute"{{.*}}etc.alloc = [array<i64: 1, {{[0-9]+}}, 128>]
  // NAIVE: "edge.permute"{{.*}}etc.alloc = [unit]
  %5 = "edge.permute"(%4) {dims = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  // CHECK: return
  return %5 : tensor<8x4xf32>
}

