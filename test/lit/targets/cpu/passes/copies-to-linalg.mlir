// RUN: etc-opt %s --split-input-file --etc-cpu-copies-to-linalg | filecheck %s

// A strided memref.copy would lower to a call of MLIR's C runtime (memrefCopy): it becomes
// linalg.copy, which lowers to loops.
// CHECK-LABEL: func.func @f
// CHECK-NOT: memref.copy
// CHECK: linalg.copy {{.*}}ins(%{{.*}} : memref<4x4xf32, strided<[8, 1]>>) outs(%{{.*}} : memref<4x4xf32>)
func.func @f(%a: memref<4x8xf32>, %b: memref<4x4xf32>) {
  %c = memref.reinterpret_cast %a to offset: [0], sizes: [4, 4], strides: [8, 1] : memref<4x8xf32> to memref<4x4xf32, strided<[8, 1]>>
  memref.copy %c, %b : memref<4x4xf32, strided<[8, 1]>> to memref<4x4xf32>
  return
}

// -----

// An in-place pair (output 0 computed in input 1's memory): the copy of the cache into its
// updated self runs only when the caller passed two buffers (pointer, offset or strides differ).
// Other copies, and copies between other arguments, stay unconditional.
// CHECK-LABEL: func.func @in_place
// CHECK: memref.extract_aligned_pointer_as_index
// CHECK: memref.extract_aligned_pointer_as_index
// CHECK: arith.cmpi ne, %intptr, %intptr
// CHECK: arith.cmpi ne, %offset, %offset
// CHECK: scf.if %{{.*}} {
// CHECK-NEXT: linalg.copy {{.*}}ins(%{{.*}} : memref<2x8x4xf32>) outs(%{{.*}} : memref<2x8x4xf32>)
// CHECK-NEXT: }
// CHECK-NOT: scf.if
// CHECK: linalg.copy {{.*}}ins(%arg0 : memref<2x4xf32>)
module attributes {etc.cpu.in_place = array<i64: 0, 1>} {
  func.func @in_place(%v: memref<2x4xf32> {etc.cpu.arg = "input:0"}, %cache: memref<1x2x8x4xf32> {etc.cpu.arg = "input:1"},
                      %out: memref<1x2x8x4xf32> {etc.cpu.arg = "output:0"}, %row: memref<2x4xf32> {etc.cpu.arg = "output:1"}) {
    %c = memref.collapse_shape %cache [[0, 1], [2], [3]] : memref<1x2x8x4xf32> into memref<2x8x4xf32>
    %o = memref.collapse_shape %out [[0, 1], [2], [3]] : memref<1x2x8x4xf32> into memref<2x8x4xf32>
    memref.copy %c, %o : memref<2x8x4xf32> to memref<2x8x4xf32>
    memref.copy %v, %row : memref<2x4xf32> to memref<2x4xf32>
    return
  }
}
