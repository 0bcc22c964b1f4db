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

// A result also read by the function before the copy (a KV cache's new value, returned and read by
// the attention): the loops write the out-param, and the readers of the reshape read it.
// CHECK-LABEL: func.func @read_before
// CHECK-SAME: (%{{.*}}: memref<4x8xf32>, %[[OUT:[a-z0-9]+]]: memref<4x8xf32>, %[[SUM:[a-z0-9]+]]: memref<f32>)
// CHECK: %[[TILES:.*]] = memref.expand_shape %[[OUT]]
// CHECK-NOT: memref.alloc
// CHECK: memref.store %{{.*}}, %[[TILES]]
// CHECK: memref.load %[[OUT]]
// CHECK-NOT: memref.copy
// CHECK: return
func.func @read_before(%x: memref<4x8xf32>, %out: memref<4x8xf32>, %sum: memref<f32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
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
  scf.for %i = %c0 to %c8 step %c1 {
    %v = memref.load %flat[%c0, %i] : memref<4x8xf32>
    %s = memref.load %sum[] : memref<f32>
    %a = arith.addf %s, %v : f32
    memref.store %a, %sum[] : memref<f32>
  }
  memref.copy %flat, %out : memref<4x8xf32> to memref<4x8xf32>
  return
}

// ... but not when the reshape is read after the copy.
// CHECK-LABEL: func.func @reshape_read_after
// CHECK: memref.alloc
// CHECK: memref.copy
func.func @reshape_read_after(%x: memref<4x2x4xf32>, %out: memref<4x8xf32>, %first: memref<f32>) {
  %c0 = arith.constant 0 : index
  %t = memref.alloc() : memref<4x2x4xf32>
  memref.copy %x, %t : memref<4x2x4xf32> to memref<4x2x4xf32>
  %flat = memref.collapse_shape %t [[0], [1, 2]] : memref<4x2x4xf32> into memref<4x8xf32>
  memref.copy %flat, %out : memref<4x8xf32> to memref<4x8xf32>
  %v = memref.load %flat[%c0, %c0] : memref<4x8xf32>
  memref.store %v, %first[] : memref<f32>
  return
}

// Through two reshapes (an index_put's select, viewed back to the cache's shape), one of them also
// read before the copy: the alloc becomes the out-param reshaped back twice.
// CHECK-LABEL: func.func @two_reshapes
// CHECK-SAME: (%{{.*}}: memref<8xf32>, %[[OUT:[a-z0-9]+]]: memref<2x4xf32>, %{{.*}}: memref<f32>)
// CHECK: %[[E:.*]] = memref.expand_shape %[[OUT]] {{\[\[}}0], [1, 2]] output_shape [2, 4, 1]
// CHECK: %[[F:.*]] = memref.collapse_shape %[[E]] {{\[\[}}0, 1, 2]] : memref<2x4x1xf32> into memref<8xf32>
// CHECK-NOT: memref.alloc
// CHECK: memref.store %{{.*}}, %[[F]]
// CHECK: memref.load %[[E]]
// CHECK-NOT: memref.copy
// CHECK: return
func.func @two_reshapes(%x: memref<8xf32>, %out: memref<2x4xf32>, %first: memref<f32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %t = memref.alloc() : memref<8xf32>
  scf.for %i = %c0 to %c8 step %c1 {
    %v = memref.load %x[%i] : memref<8xf32>
    memref.store %v, %t[%i] : memref<8xf32>
  }
  %e = memref.expand_shape %t [[0, 1, 2]] output_shape [2, 4, 1] : memref<8xf32> into memref<2x4x1xf32>
  %v = memref.load %e[%c0, %c1, %c0] : memref<2x4x1xf32>
  memref.store %v, %first[] : memref<f32>
  %c = memref.collapse_shape %e [[0], [1, 2]] : memref<2x4x1xf32> into memref<2x4xf32>
  memref.copy %c, %out : memref<2x4xf32> to memref<2x4xf32>
  return
}
