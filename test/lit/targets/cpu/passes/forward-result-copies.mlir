// RUN: etc-opt %s --etc-cpu-forward-result-copies | filecheck %s

// A loop nest writing a temporary that is then copied into the out-param writes the out-param
// directly; a self copy left by a tiled insert_slice goes.
// CHECK-LABEL: func.func @f
// CHECK-SAME: (%{{.*}}: memref<16xf32>, %[[OUT:[a-z0-9]+]]: memref<16xf32>)
// CHECK-NOT: memref.alloc
// CHECK: scf.for
// CHECK: memref.store %{{.*}}, %[[OUT]]
// CHECK-NOT: memref.copy
// CHECK: return
func.func @f(%x: memref<16xf32>, %out: memref<16xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %t = memref.alloc() : memref<16xf32>
  scf.for %i = %c0 to %c16 step %c1 {
    %v = memref.load %x[%i] : memref<16xf32>
    memref.store %v, %t[%i] : memref<16xf32>
  }
  memref.copy %x, %x : memref<16xf32> to memref<16xf32>
  memref.copy %t, %out : memref<16xf32> to memref<16xf32>
  return
}
