// RUN: etc-opt %s --etc-cpu-copies-to-linalg | filecheck %s

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
