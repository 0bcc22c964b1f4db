// RUN: not etc-opt %s --etc-cpu-split-threads 2>&1 | filecheck %s

// A value thread 0 read from a buffer it then overwrote, and that the next loop nest uses, has no
// way to the other threads (reading it again after the barrier would give the new value): an
// error, never a race or a wrong value.
// CHECK: 'memref.load' runs on one thread but its result is used after it by 'arith.addf'
func.func @overwritten(%x: memref<64xf32> {etc.cpu.arg = "input:0", llvm.noalias}, %s: memref<f32> {etc.cpu.arg = "input:1", llvm.noalias},
                       %acc: memref<f32> {etc.cpu.arg = "output:0", llvm.noalias}, %out: memref<64xf32> {etc.cpu.arg = "output:1", llvm.noalias}) {
  %c = memref.load %s[] : memref<f32>
  memref.store %c, %acc[] : memref<f32>
  %v = memref.load %acc[] : memref<f32>
  %w = arith.mulf %v, %v : f32
  memref.store %w, %acc[] : memref<f32>
  linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>], iterator_types = ["parallel"]} ins(%x : memref<64xf32>) outs(%out : memref<64xf32>) {
  ^bb0(%a: f32, %b: f32):
    %m = arith.addf %a, %v : f32
    linalg.yield %m : f32
  }
  return
}
