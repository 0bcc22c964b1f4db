// RUN: etc-opt %s --etc-cpu-prefetch-gemm-tiles | filecheck %s

// A 2 x 32 f32 register tile (as the GEMM tiling leaves it, bufferized): each of its rows is two
// 64-byte lines of C, prefetched for writing (into L1) before the k loop; inside it, the B panel
// row the k step reads (32 f32: two lines) is prefetched 16 rows ahead, the A column it reads
// (one element per row) is not. The masked store of a partial panel is not prefetched (the
// lines past its columns may be another thread's), nor is anything around a loop the tiling
// did not mark.
// CHECK-LABEL: func.func @tile(
// CHECK-SAME: %[[A:[a-z0-9]+]]: memref<2x8xf32>, %[[B:[a-z0-9]+]]: memref<8x32xf32>, %[[C:[a-z0-9]+]]: memref<4x64xf32>, %[[I:[a-z0-9]+]]: index, %[[J:[a-z0-9]+]]: index
// CHECK: memref.prefetch %[[C]][%[[I]], %[[J]]], write, locality<3>, data
// CHECK: %[[J16:.*]] = arith.addi %[[J]], %{{.*}}
// CHECK: memref.prefetch %[[C]][%[[I]], %[[J16]]], write, locality<3>, data
// CHECK: %[[I1:.*]] = arith.addi %[[I]], %{{.*}}
// CHECK: memref.prefetch %[[C]][%[[I1]], %[[J]]], write, locality<3>, data
// CHECK: memref.prefetch %[[C]][%{{.*}}, %{{.*}}], write, locality<3>, data
// CHECK-NOT: memref.prefetch
// CHECK: scf.for %[[K:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args
// CHECK: %[[C16:.*]] = arith.constant 16 : index
// CHECK: %[[AHEAD:.*]] = arith.addi %[[K]], %[[C16]]
// CHECK: memref.prefetch %[[B]][%[[AHEAD]], %{{.*}}], read, locality<3>, data
// CHECK: memref.prefetch %[[B]][%[[AHEAD]], %{{.*}}], read, locality<3>, data
// CHECK-NOT: memref.prefetch
// CHECK: vector.transfer_read %[[B]]
// CHECK-NOT: memref.prefetch
// CHECK: {etc.cpu.gemm_k_loop}
// CHECK-NEXT: vector.transfer_write
// CHECK: scf.for
// CHECK: memref.prefetch %[[B]]
// CHECK: memref.prefetch %[[B]]
// CHECK-NOT: memref.prefetch
// CHECK: {etc.cpu.gemm_k_loop}
// CHECK-NOT: memref.prefetch
// CHECK: return
func.func @tile(%a: memref<2x8xf32>, %b: memref<8x32xf32>, %c: memref<4x64xf32>, %i: index, %j: index,
                %m: vector<2x32xi1>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %z = arith.constant dense<0.0> : vector<2x32xf32>
  %f = arith.constant 0.0 : f32
  %acc = scf.for %k = %c0 to %c8 step %c1 iter_args(%v = %z) -> (vector<2x32xf32>) {
    %col = vector.transfer_read %a[%c0, %k], %f {in_bounds = [true, true]} : memref<2x8xf32>, vector<2x1xf32>
    %row = vector.transfer_read %b[%k, %c0], %f {in_bounds = [true, true]} : memref<8x32xf32>, vector<1x32xf32>
    %x = vector.broadcast %col : vector<2x1xf32> to vector<2x2x1xf32>
    %y = vector.broadcast %row : vector<1x32xf32> to vector<2x32xf32>
    %s = arith.addf %v, %y : vector<2x32xf32>
    scf.yield %s : vector<2x32xf32>
  } {etc.cpu.gemm_k_loop}
  vector.transfer_write %acc, %c[%i, %j] {in_bounds = [true, true]} : vector<2x32xf32>, memref<4x64xf32>
  %acc2 = scf.for %k = %c0 to %c8 step %c1 iter_args(%v = %z) -> (vector<2x32xf32>) {
    %row = vector.transfer_read %b[%k, %c0], %f {in_bounds = [true, true]} : memref<8x32xf32>, vector<1x32xf32>
    %y = vector.broadcast %row : vector<1x32xf32> to vector<2x32xf32>
    %s = arith.addf %v, %y : vector<2x32xf32>
    scf.yield %s : vector<2x32xf32>
  } {etc.cpu.gemm_k_loop}
  vector.transfer_write %acc2, %c[%i, %j], %m {in_bounds = [true, true]} : vector<2x32xf32>, memref<4x64xf32>
  %acc3 = scf.for %k = %c0 to %c8 step %c1 iter_args(%v = %z) -> (vector<2x32xf32>) {
    %row = vector.transfer_read %b[%k, %c0], %f {in_bounds = [true, true]} : memref<8x32xf32>, vector<1x32xf32>
    %y = vector.broadcast %row : vector<1x32xf32> to vector<2x32xf32>
    %s = arith.addf %v, %y : vector<2x32xf32>
    scf.yield %s : vector<2x32xf32>
  }
  vector.transfer_write %acc3, %c[%i, %j] {in_bounds = [true, true]} : vector<2x32xf32>, memref<4x64xf32>
  return
}
