// RUN: etc-opt %s | etc-opt | filecheck %s
// aten ops print and parse in generic form; a round trip keeps every attribute,
// the list slots and the symbolic-size operands.

// CHECK-LABEL: func.func @ops
func.func @ops(%x: tensor<2x3xf32>, %y: tensor<4x3xf32>, %n: index) -> tensor<?x3xf32> {
  // CHECK: "aten.add_tensor"(%arg0, %arg0) {alpha = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>}
  %0 = "aten.add_tensor"(%x, %x) {alpha = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: "aten.cat"(%0, %arg1) {dim = 0 : i64
  %1 = "aten.cat"(%0, %y) {dim = 0 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<6x3xf32>
  // CHECK: "aten.view"(%1, %arg2) {{.*}}size = array<i64: -9223372036854775808, 3>
  %2 = "aten.view"(%1, %n) {operandSegmentSizes = array<i32: 1, 1>, size = array<i64: -9223372036854775808, 3>} : (tensor<6x3xf32>, index) -> tensor<?x3xf32>
  return %2 : tensor<?x3xf32>
}

// CHECK-LABEL: func.func @private_op_names
func.func @private_op_names(%x: tensor<2x3xf32>) -> tensor<2x3xf16> {
  // CHECK: "aten.p_to_copy"(%arg0) {device, dtype = f16, layout, memory_format, non_blocking = false, pin_memory}
  %0 = "aten.p_to_copy"(%x) {device, dtype = f16, layout, memory_format, non_blocking = false, pin_memory} : (tensor<2x3xf32>) -> tensor<2x3xf16>
  return %0 : tensor<2x3xf16>
}
