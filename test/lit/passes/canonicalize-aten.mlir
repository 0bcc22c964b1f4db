// RUN: etc-opt %s --split-input-file --etc-canonicalize-aten | filecheck %s
// RUN: etc-opt %s --split-input-file --etc-canonicalize-aten --mlir-pass-statistics -o /dev/null 2>&1 | filecheck %s --check-prefix=STATS
// STATS: // pass statistics: etc-canonicalize-aten: removed = 11
// STATS-NEXT: // pass statistics: etc-canonicalize-aten: removed = 2
// STATS-NEXT: // pass statistics: etc-canonicalize-aten: removed = 2
// STATS-NEXT: // pass statistics: etc-canonicalize-aten: removed = 2
// STATS-NEXT: // pass statistics: etc-canonicalize-aten: removed = 3
// STATS-NEXT: // pass statistics: etc-canonicalize-aten: removed = 2

// Identity views go: their users read the input directly.
// CHECK-LABEL: func.func @identity_views
func.func @identity_views(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK-NOT: aten.view
  // CHECK-NOT: aten.reshape
  // CHECK-NOT: aten.p_unsafe_view
  // CHECK-NOT: aten.expand
  // CHECK-NOT: aten.permute
  // CHECK-NOT: aten.transpose_int
  // CHECK-NOT: aten.slice_tensor
  // CHECK-NOT: aten.alias
  // CHECK-NOT: aten.detach
  // CHECK-NOT: aten.squeeze
  // CHECK-NOT: aten.contiguous
  // CHECK-NOT: aten.dropout
  // CHECK: %[[R:.+]] = "aten.relu"(%arg0)
  // CHECK-NEXT: return %[[R]]
  %0 = "aten.view"(%x) {size = array<i64: 4, 8>} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = "aten.reshape"(%0) {shape = array<i64: 4, -1>} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = "aten.p_unsafe_view"(%1) {size = array<i64: 4, 8>} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = "aten.expand"(%2) {implicit = false, operandSegmentSizes = array<i32: 1, 0>, size = array<i64: 4, 8>} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %4 = "aten.permute"(%3) {dims = array<i64: 0, -1>} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %5 = "aten.transpose_int"(%4) {dim0 = 1 : i64, dim1 = -1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %6 = "aten.slice_tensor"(%5) {dim = 1 : i64, end = 9223372036854775807 : i64, operandSegmentSizes = array<i32: 1, 0, 0, 0>, start = 0 : i64, step = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %7 = "aten.alias"(%6) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %8 = "aten.detach"(%7) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %9 = "aten.squeeze_dim"(%8) {dim = 0 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %10 = "aten.contiguous"(%9) {memory_format = "contiguous_format"} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %11 = "aten.dropout"(%10) {p = 5.000000e-01 : f64, train = false} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %12 = "aten.relu"(%11) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %12 : tensor<4x8xf32>
}

// -----

// Views that change something stay.
// CHECK-LABEL: func.func @real_views
func.func @real_views(%x: tensor<4x8xf32>, %d: tensor<?x8xf32>) -> (tensor<32xf32>, tensor<8x4xf32>, tensor<4x4xf32>, tensor<?x8xf32>, tensor<4x8xf32>) {
  // CHECK: "aten.view"(%arg0)
  // CHECK: "aten.permute"(%arg0)
  // CHECK: "aten.slice_tensor"(%arg0)
  // CHECK: "aten.view"(%arg1, %{{.*}})
  // CHECK: "aten.dropout"(%arg0)
  %0 = "aten.view"(%x) {size = array<i64: 32>} : (tensor<4x8xf32>) -> tensor<32xf32>
  %1 = "aten.permute"(%x) {dims = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  %2 = "aten.slice_tensor"(%x) {dim = 1 : i64, end = 4 : i64, operandSegmentSizes = array<i32: 1, 0, 0, 0>, start = 0 : i64, step = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x4xf32>
  // A symbolic size may differ from the input's at run time even when the types agree.
  %s = arith.constant 4 : index
  %3 = "aten.view"(%d, %s) {size = array<i64: -9223372036854775808, 8>} : (tensor<?x8xf32>, index) -> tensor<?x8xf32>
  %4 = "aten.dropout"(%x) {p = 5.000000e-01 : f64, train = true} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0, %1, %2, %3, %4 : tensor<32xf32>, tensor<8x4xf32>, tensor<4x4xf32>, tensor<?x8xf32>, tensor<4x8xf32>
}

// -----

// squeeze/unsqueeze of the same unit dim cancel.
// One dynamic dim inferred (-1) with the other sizes equal: still the identity.
// A view of a view reads the first one's input (and is the identity here).
// CHECK-LABEL: func.func @dynamic_identity
func.func @dynamic_identity(%d: tensor<?x8xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>) {
  // CHECK-NEXT: return %arg0, %arg0
  %0 = "aten.reshape"(%d) {shape = array<i64: -1, 8>} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %1 = "aten.view"(%d) {size = array<i64: -1, 4>} : (tensor<?x8xf32>) -> tensor<?x4xf32>
  %2 = "aten.view"(%1) {size = array<i64: -1, 8>} : (tensor<?x4xf32>) -> tensor<?x8xf32>
  return %0, %2 : tensor<?x8xf32>, tensor<?x8xf32>
}

// -----

// CHECK-LABEL: func.func @view_chains
func.func @view_chains(%x: tensor<2x3x4xf32>) -> (tensor<24xf32>, tensor<6x4xf32>) {
  // CHECK-NEXT: %[[F:.+]] = "aten.view"(%arg0) {size = array<i64: 24>}
  // CHECK-NEXT: %[[M:.+]] = "aten.reshape"(%arg0) {shape = array<i64: 6, 4>}
  // CHECK-NEXT: return %[[F]], %[[M]]
  %0 = "aten.view"(%x) {size = array<i64: 6, 4>} : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
  %1 = "aten.view"(%0) {size = array<i64: 24>} : (tensor<6x4xf32>) -> tensor<24xf32>
  %2 = "aten.p_unsafe_view"(%x) {size = array<i64: 4, 6>} : (tensor<2x3x4xf32>) -> tensor<4x6xf32>
  %3 = "aten.reshape"(%2) {shape = array<i64: 6, 4>} : (tensor<4x6xf32>) -> tensor<6x4xf32>
  return %1, %3 : tensor<24xf32>, tensor<6x4xf32>
}

// -----

// CHECK-LABEL: func.func @squeeze_pairs
func.func @squeeze_pairs(%x: tensor<1x8xf32>, %y: tensor<8xf32>) -> (tensor<1x8xf32>, tensor<8xf32>, tensor<8x1xf32>) {
  // CHECK-NOT: aten.squeeze_dim
  // CHECK: %[[U:.+]] = "aten.unsqueeze"(%arg1) {dim = 1 : i64}
  // CHECK-NOT: aten.squeeze_dim
  // CHECK: return %arg0, %arg1, %[[U]]
  %0 = "aten.squeeze_dim"(%x) {dim = 0 : i64} : (tensor<1x8xf32>) -> tensor<8xf32>
  %1 = "aten.unsqueeze"(%0) {dim = -2 : i64} : (tensor<8xf32>) -> tensor<1x8xf32>
  %2 = "aten.unsqueeze"(%y) {dim = 1 : i64} : (tensor<8xf32>) -> tensor<8x1xf32>
  %3 = "aten.squeeze_dim"(%2) {dim = -1 : i64} : (tensor<8x1xf32>) -> tensor<8xf32>
  return %1, %3, %2 : tensor<1x8xf32>, tensor<8xf32>, tensor<8x1xf32>
}

// -----

// Copies and casts to the same dtype go, unless the program would then return
// storage it does not own (an input, a weight) or one buffer twice.
ml_program.global private @w(dense<1.0> : tensor<4xf32>) : tensor<4xf32>
// CHECK-LABEL: func.func @copies
func.func @copies(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xi32>) {
  // CHECK: %[[R:.+]] = "aten.relu"(%arg0)
  // CHECK-NEXT: %[[N:.+]] = "aten.neg"(%[[R]])
  %0 = "aten.clone"(%x) {memory_format} : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "aten.relu"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = "aten.p_to_copy"(%1) {device, dtype = f32, layout, memory_format, non_blocking, pin_memory} : (tensor<4xf32>) -> tensor<4xf32>
  %3 = "aten.to_dtype"(%2) {copy = false, dtype = f32, memory_format, non_blocking = false} : (tensor<4xf32>) -> tensor<4xf32>
  %4 = "aten.neg"(%3) : (tensor<4xf32>) -> tensor<4xf32>
  // CHECK-NEXT: %[[C1:.+]] = "aten.clone"(%arg0) {memory_format}
  %5 = "aten.clone"(%x) {memory_format} : (tensor<4xf32>) -> tensor<4xf32>
  // CHECK-NEXT: %[[W:.+]] = ml_program.global_load_const @w
  // CHECK-NEXT: %[[C2:.+]] = "aten.p_to_copy"(%[[W]])
  %w = ml_program.global_load_const @w : tensor<4xf32>
  %6 = "aten.p_to_copy"(%w) {device, dtype = f32, layout, memory_format, non_blocking, pin_memory} : (tensor<4xf32>) -> tensor<4xf32>
  // CHECK-NEXT: %[[C3:.+]] = "aten.clone"(%[[N]]) {memory_format}
  %7 = "aten.clone"(%4) {memory_format} : (tensor<4xf32>) -> tensor<4xf32>
  // A real cast stays.
  // CHECK-NEXT: %[[CAST:.+]] = "aten.p_to_copy"(%[[N]]) {{.*}}dtype = i32
  %8 = "aten.p_to_copy"(%4) {device, dtype = i32, layout, memory_format, non_blocking, pin_memory} : (tensor<4xf32>) -> tensor<4xi32>
  // CHECK-NEXT: return %[[N]], %[[C1]], %[[C2]], %[[C3]], %[[CAST]]
  return %4, %5, %6, %7, %8 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xi32>
}

// -----

// The edge ops of the same names follow the same rules.
// CHECK-LABEL: func.func @edge
func.func @edge(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK-NEXT: %[[R:.+]] = "edge.relu"(%arg0)
  // CHECK-NEXT: return %[[R]]
  %0 = "edge.view"(%x) {size = array<i64: 4, 8>} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = "edge.clone"(%0) {memory_format} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = "edge.relu"(%1) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}
