// RUN: etc-opt %s --split-input-file --etc-cpu-entry-abi | filecheck %s

// The out-param bufferization added becomes output 0; every argument is noalias; the ABI the
// blob records (kind, name, dtype, shape; a packed constant's pack function) and the scratch
// size go on the module, where they survive the lowering to the LLVM dialect.
// CHECK: module attributes {etc.cpu.abi = [{dtype = "float32", kind = "input", name = "0", shape = array<i64: 2, 8>}, {dtype = "float32", kind = "constant", name = "w#packed0", pack = "func.func @pack", shape = array<i64: 8, 4>}, {dtype = "float32", kind = "output", name = "0", shape = array<i64: 2, 4>}, {dtype = "uint8", kind = "scratch", name = "scratch", shape = array<i64: 0>}], etc.cpu.scratch_bytes = 64 : i64}
// CHECK: func.func @f(%{{.*}}: memref<2x8xf32> {etc.cpu.arg = "input:0", llvm.noalias}, %{{.*}}: memref<8x4xf32> {etc.cpu.arg = "constant:w#packed0", llvm.noalias}, %{{.*}}: memref<2x4xf32> {etc.cpu.arg = "output:0", llvm.noalias}, %{{.*}}: memref<4xf32> {etc.cpu.arg = "scratch:0", llvm.noalias})
func.func @f(%x: memref<2x8xf32> {etc.cpu.arg = "input:0", bufferization.writable = false},
             %w: memref<8x4xf32> {etc.cpu.arg = "constant:w#packed0", etc.cpu.pack = "func.func @pack", bufferization.writable = false},
             %out: memref<2x4xf32>, %t: memref<4xf32> {etc.cpu.arg = "scratch:0"}) attributes {etc.cpu.scratch_bytes = 64 : i64} {
  linalg.matmul ins(%x, %w : memref<2x8xf32>, memref<8x4xf32>) outs(%out : memref<2x4xf32>)
  return
}

// -----

// An in-place pair (output 0 computed in input 1's memory, a KV cache the program passes as
// both): those two may be one buffer, so neither is noalias; the others still are.
// CHECK-LABEL: func.func @cache
// CHECK-SAME: %{{.*}}: memref<8xf32> {etc.cpu.arg = "input:0", llvm.noalias}, %{{.*}}: memref<16xf32> {etc.cpu.arg = "input:1"}, %{{.*}}: memref<16xf32> {etc.cpu.arg = "output:0"}, %{{.*}}: memref<8xf32> {etc.cpu.arg = "output:1", llvm.noalias})
module attributes {etc.cpu.in_place = array<i64: 0, 1>} {
  func.func @cache(%x: memref<8xf32> {etc.cpu.arg = "input:0"}, %c: memref<16xf32> {etc.cpu.arg = "input:1"},
                   %new: memref<16xf32>, %y: memref<8xf32>) {
    return
  }
}

// -----

// Scratch buffers sharing bytes (etc-cpu-plan-scratch gives disjoint lifetimes the same offset)
// are not noalias in the entry; a scratch buffer of its own bytes still is.
// CHECK-LABEL: func.func @reuse
// CHECK-SAME: %{{.*}}: memref<4xf32> {etc.cpu.arg = "scratch:0"}, %{{.*}}: memref<2xf32> {etc.cpu.arg = "scratch:0"}, %{{.*}}: memref<4xf32> {etc.cpu.arg = "scratch:64", llvm.noalias})
func.func @reuse(%out: memref<4xf32>, %a: memref<4xf32> {etc.cpu.arg = "scratch:0"},
                 %b: memref<2xf32> {etc.cpu.arg = "scratch:0"}, %c: memref<4xf32> {etc.cpu.arg = "scratch:64"})
    attributes {etc.cpu.scratch_bytes = 128 : i64} {
  return
}
