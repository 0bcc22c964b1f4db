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

// A GEMM's result in its tile layout [rows, panels, nr] reaches the out-param through a
// collapse: the loops write the out-param expanded back to the tile layout, no copy.
// CHECK-LABEL: func.func @through_reshape
// CHECK-SAME: (%{{.*}}: memref<4x8xf32>, %[[OUT:[a-z0-9]+]]: memref<4x8xf32>)
// CHECK: %[[TILES:.*]] = memref.expand_shape %[[OUT]] {{\[\[}}0], [1, 2]] output_shape [4, 2, 4] : memref<4x8xf32> into memref<4x2x4xf32>
// CHECK-NOT: memref.alloc
// CHECK: memref.store %{{.*}}, %[[TILES]]
// CHECK-NOT: memref.copy
// CHECK: return
func.func @through_reshape(%x: memref<4x8xf32>, %out: memref<4x8xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %t = memref.alloc() : memref<4x2x4xf32>
  %xs = memref.expand_shape %x [[0], [1, 2]] output_shape [4, 2, 4] : memref<4x8xf32> into memref<4x2x4xf32>
  scf.for %i = %c0 to %c4 step %c1 {
    scf.for %j = %c0 to %c2 step %c1 {
      scf.for %k = %c0 to %c4 step %c1 {
        %v = memref.load %xs[%i, %j, %k] : memref<4x2x4xf32>
        memref.store %v, %t[%i, %j, %k] : memref<4x2x4xf32>
      }
    }
  }
  %flat = memref.collapse_shape %t [[0], [1, 2]] : memref<4x2x4xf32> into memref<4x8xf32>
  memref.copy %flat, %out : memref<4x8xf32> to memref<4x8xf32>
  return
}

// A copy whose source is read again after it stays (the out-param would be read early).
// CHECK-LABEL: func.func @read_after
// CHECK: memref.alloc
// CHECK: memref.copy
func.func @read_after(%x: memref<4x8xf32>, %out: memref<4x8xf32>, %other: memref<4x2x4xf32>) {
  %t = memref.alloc() : memref<4x2x4xf32>
  memref.copy %other, %t : memref<4x2x4xf32> to memref<4x2x4xf32>
  %flat = memref.collapse_shape %t [[0], [1, 2]] : memref<4x2x4xf32> into memref<4x8xf32>
  memref.copy %flat, %out : memref<4x8xf32> to memref<4x8xf32>
  memref.copy %t, %other : memref<4x2x4xf32> to memref<4x2x4xf32>
  return
}
