// Each chunk is parsed and transformed on its own; outputs are joined by the marker,
// and a failing chunk does not stop the others.
// RUN: not etc-opt %s --split-input-file --etc-dce 2>%t.err | filecheck %s
// RUN: filecheck %s --check-prefix=ERR < %t.err

// CHECK: func.func @first
// CHECK-NOT: aten.relu
// CHECK: // -----
// CHECK-NEXT: // -----
// CHECK-NEXT: module {
// CHECK-NEXT: func.func @third
func.func @first(%x: tensor<4xf32>) {
  %0 = "aten.relu"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return
}
// -----
// ERR: split-input-file.mlir:[[# @LINE + 2]]:3: error: 'func.return' op has 1 operands, but enclosing function (@second) returns 0
func.func @second(%x: i32) {
  return %x : i32
}
// -----
func.func @third() {
  return
}
