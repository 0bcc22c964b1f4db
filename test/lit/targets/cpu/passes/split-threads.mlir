// RUN: etc-opt %s --etc-cpu-split-threads | filecheck %s

// The threaded ABI: the entry gains (barrier, tid, nthreads); the rows loop (the first parallel
// loop with at least 4 iterations) is the one threads share, each taking its chunk
// [tid * ceil(64 / nthreads), ...) clamped to 64; all threads meet at the barrier after the nest.
// CHECK: func.func private @etc_cpu_barrier(memref<2xi32>, index)
// CHECK: func.func @f(%{{.*}}: memref<64x32xf32> {{{.*}}}, %{{.*}}: memref<64x32xf32> {{{.*}}}, %[[BARRIER:[a-z0-9]+]]: memref<2xi32>, %[[TID:[a-z0-9]+]]: index, %[[N:[a-z0-9]+]]: index) attributes {etc.cpu.threaded}
// CHECK: %[[CHUNK:.*]] = arith.ceildivsi %{{.*}}, %[[N]] : index
// CHECK: arith.muli %[[TID]], %{{.*}} : index
// CHECK: scf.for %{{.*}} = %[[LO:.*]] to %[[HI:.*]] step
// CHECK-NEXT: scf.for %{{.*}} = %c0 to %c32
// CHECK: } {etc.thread_split}
// CHECK-NEXT: call @etc_cpu_barrier(%[[BARRIER]], %[[N]])
func.func @f(%x: memref<64x32xf32> {etc.cpu.arg = "input:0", llvm.noalias}, %out: memref<64x32xf32> {etc.cpu.arg = "output:0", llvm.noalias}) {
  %z = arith.constant 0.0 : f32
  linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]} ins(%x : memref<64x32xf32>) outs(%out : memref<64x32xf32>) {
  ^bb0(%a: f32, %b: f32):
    %m = arith.maximumf %a, %z : f32
    linalg.yield %m : f32
  }
  return
}
