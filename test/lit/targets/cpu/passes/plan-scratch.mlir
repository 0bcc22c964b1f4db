// RUN: etc-opt %s --split-input-file --etc-cpu-plan-scratch | filecheck %s
// RUN: etc-opt %s --split-input-file --etc-cpu-plan-scratch=alignment=128 | filecheck %s --check-prefix=A128
// RUN: etc-opt %s --split-input-file --verify-diagnostics --etc-cpu-plan-scratch=alignment=3

// Each static alloc becomes a trailing argument at an aligned offset inside one scratch
// buffer; its dealloc goes. Buffers whose lifetimes (the top-level ops using them or a view of
// them) overlap get disjoint bytes: %a (40 bytes, from its fill to its copy) at 0, %b (24 bytes,
// from its view to the fill through it) at 64. %c, used only after both, reuses offset 0: 128
// bytes in all.
// CHECK-LABEL: func.func @f
// CHECK-SAME: %[[A:[a-z0-9]+]]: memref<10xf32> {etc.cpu.arg = "scratch:0"}
// CHECK-SAME: %[[B:[a-z0-9]+]]: memref<3xi64> {etc.cpu.arg = "scratch:64"}
// CHECK-SAME: %[[C:[a-z0-9]+]]: memref<16xf32> {etc.cpu.arg = "scratch:0"}
// CHECK-SAME: etc.cpu.scratch_bytes = 128 : i64
// CHECK-NOT: memref.alloc
// CHECK-NOT: memref.dealloc
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%[[A]] : memref<10xf32>)
// A128: etc.cpu.arg = "scratch:0"
// A128: etc.cpu.arg = "scratch:128"
// A128-SAME: etc.cpu.scratch_bytes = 256 : i64
// expected-error@+1 {{etc-cpu-plan-scratch: alignment must be a power of two, got 3}}
func.func @f(%out: memref<10xf32> {etc.cpu.arg = "output:0"}, %idx: memref<3xi64> {etc.cpu.arg = "output:1"},
             %last: memref<16xf32> {etc.cpu.arg = "output:2"}) {
  %z = arith.constant 0.0 : f32
  %a = memref.alloc() : memref<10xf32>
  %b = memref.alloc() : memref<3xi64>
  %c = memref.alloc() : memref<16xf32>
  linalg.fill ins(%z : f32) outs(%a : memref<10xf32>)
  %v = memref.subview %b[0] [2] [1] : memref<3xi64> to memref<2xi64, strided<[1]>>
  memref.copy %a, %out : memref<10xf32> to memref<10xf32>
  memref.copy %b, %idx : memref<3xi64> to memref<3xi64>
  %zero = arith.constant 0 : i64
  linalg.fill ins(%zero : i64) outs(%v : memref<2xi64, strided<[1]>>)
  linalg.fill ins(%z : f32) outs(%c : memref<16xf32>)
  memref.copy %c, %last : memref<16xf32> to memref<16xf32>
  memref.dealloc %a : memref<10xf32>
  memref.dealloc %b : memref<3xi64>
  memref.dealloc %c : memref<16xf32>
  return
}

// -----

// A buffer inside a loop the threads share (a GEMM kernel's column panel buffer) is no scratch
// argument, which every thread would write: a stack allocation in front of the loop nest, which
// every thread runs and etc-cpu-outline-regions moves into the nest's function.
// CHECK-LABEL: func.func @per_thread
// CHECK-SAME: etc.cpu.scratch_bytes = 0 : i64
// CHECK: %[[BUF:.*]] = memref.alloca() {alignment = 64 : i64} : memref<72x64xf32>
// CHECK-NEXT: scf.for
// CHECK-NEXT: scf.for
// CHECK-NEXT: linalg.fill ins(%{{.*}} : f32) outs(%[[BUF]] : memref<72x64xf32>)
// CHECK-NEXT: memref.copy %[[BUF]]
// CHECK-NEXT: } {etc.thread_split}
// CHECK-NEXT: }
// expected-error@+1 {{etc-cpu-plan-scratch: alignment must be a power of two, got 3}}
func.func @per_thread(%out: memref<72x64xf32> {etc.cpu.arg = "output:0"}) {
  %z = arith.constant 0.0 : f32
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  scf.for %b = %c0 to %c4 step %c1 {
    scf.for %j = %c0 to %c4 step %c1 {
      %a = memref.alloc() : memref<72x64xf32>
      linalg.fill ins(%z : f32) outs(%a : memref<72x64xf32>)
      memref.copy %a, %out : memref<72x64xf32> to memref<72x64xf32>
    } {etc.thread_split}
  }
  return
}

// -----

// A buffer the shared loop sizes (the partial panel of a row block whose last block is shorter:
// affine.min of the block and the rows left) is a stack allocation at its upper bound, viewed at
// its run-time rows where the alloc was.
// CHECK-LABEL: func.func @per_thread_dynamic
// CHECK-SAME: etc.cpu.scratch_bytes = 0 : i64
// CHECK: %[[BUF:.*]] = memref.alloca() {alignment = 64 : i64} : memref<8424xf32>
// CHECK-NEXT: scf.for
// CHECK-NEXT: affine.min
// CHECK-NEXT: scf.for
// CHECK: %[[VIEW:.*]] = memref.reinterpret_cast %[[BUF]]
// CHECK-SAME: to memref<?x36xf32>
// CHECK-NEXT: linalg.fill ins(%{{.*}} : f32) outs(%[[VIEW]] : memref<?x36xf32>)
// CHECK: } {etc.thread_split}
// expected-error@+1 {{etc-cpu-plan-scratch: alignment must be a power of two, got 3}}
func.func @per_thread_dynamic(%out: memref<2051x36xf32> {etc.cpu.arg = "output:0"}) {
  %z = arith.constant 0.0 : f32
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c234 = arith.constant 234 : index
  %c2051 = arith.constant 2051 : index
  scf.for %i = %c0 to %c2051 step %c234 {
    %rows = affine.min affine_map<(d0) -> (234, -d0 + 2051)>(%i)
    scf.for %j = %c0 to %c4 step %c1 {
      %a = memref.alloc(%rows) : memref<?x36xf32>
      linalg.fill ins(%z : f32) outs(%a : memref<?x36xf32>)
      %o = memref.subview %out[%i, 0] [%rows, 36] [1, 1] : memref<2051x36xf32> to memref<?x36xf32, strided<[36, 1], offset: ?>>
      memref.copy %a, %o : memref<?x36xf32> to memref<?x36xf32, strided<[36, 1], offset: ?>>
    } {etc.thread_split}
  }
  return
}

// -----

// A torch.cond branch's result: %r is filled inside the scf.if and yielded, so it lives until the
// copy after the if reads it; %i, written between the two, must not share its bytes (it did: the
// indices of an index_put overwrote the branch's result).
// CHECK-LABEL: func.func @branch_result
// CHECK-SAME: %{{[a-z0-9]+}}: memref<8xf32> {etc.cpu.arg = "scratch:0"}
// CHECK-SAME: %{{[a-z0-9]+}}: memref<3xi64> {etc.cpu.arg = "scratch:64"}
// CHECK-SAME: etc.cpu.scratch_bytes = 128 : i64
// expected-error@+1 {{etc-cpu-plan-scratch: alignment must be a power of two, got 3}}
func.func @branch_result(%p: i1, %out: memref<8xf32> {etc.cpu.arg = "output:0"},
                         %idx: memref<3xi64> {etc.cpu.arg = "output:1"}) {
  %z = arith.constant 0.0 : f32
  %zero = arith.constant 0 : i64
  %r = memref.alloc() : memref<8xf32>
  %i = memref.alloc() : memref<3xi64>
  %y = scf.if %p -> (memref<8xf32>) {
    linalg.fill ins(%z : f32) outs(%r : memref<8xf32>)
    scf.yield %r : memref<8xf32>
  } else {
    scf.yield %out : memref<8xf32>
  }
  linalg.fill ins(%zero : i64) outs(%i : memref<3xi64>)
  memref.copy %i, %idx : memref<3xi64> to memref<3xi64>
  memref.copy %y, %out : memref<8xf32> to memref<8xf32>
  return
}

// -----

// An index read back at the top level (a memref.load outside any nest, as an index_put's
// normalized index is) lasts until the next nest ends: etc-cpu-split-threads runs the load on
// every thread, unsynchronized with that nest, so %sum, which the nest writes, must not share
// %index's bytes (it did: one thread wrote the sum over the index another had yet to read, and
// the slice it chose wrote out of bounds). %late, first used after that nest, shares %sum's.
// CHECK-LABEL: func.func @index_read_at_top_level
// CHECK-SAME: %{{[a-z0-9]+}}: memref<1xi64> {etc.cpu.arg = "scratch:192"}
// CHECK-SAME: %{{[a-z0-9]+}}: memref<40xf32> {etc.cpu.arg = "scratch:0"}
// CHECK-SAME: %{{[a-z0-9]+}}: memref<2xi64> {etc.cpu.arg = "scratch:0"}
// CHECK-SAME: etc.cpu.scratch_bytes = 256 : i64
// expected-error@+1 {{etc-cpu-plan-scratch: alignment must be a power of two, got 3}}
func.func @index_read_at_top_level(%src: memref<2x40xf32> {etc.cpu.arg = "input:0"},
                                   %out: memref<40xf32> {etc.cpu.arg = "output:0"},
                                   %idx: memref<2xi64> {etc.cpu.arg = "output:1"}) {
  %c0 = arith.constant 0 : index
  %one = arith.constant 1 : i64
  %index = memref.alloc() : memref<1xi64>
  %sum = memref.alloc() : memref<40xf32>
  %late = memref.alloc() : memref<2xi64>
  linalg.fill ins(%one : i64) outs(%index : memref<1xi64>)
  %i = memref.load %index[%c0] : memref<1xi64>
  %row = arith.index_cast %i : i64 to index
  %slice = memref.subview %src[%row, 0] [1, 40] [1, 1] : memref<2x40xf32> to memref<40xf32, strided<[1], offset: ?>>
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%slice : memref<40xf32, strided<[1], offset: ?>>) outs(%sum : memref<40xf32>) {
  ^bb0(%x: f32, %o: f32):
    %d = arith.addf %x, %x : f32
    linalg.yield %d : f32
  }
  memref.copy %sum, %out : memref<40xf32> to memref<40xf32>
  linalg.fill ins(%one : i64) outs(%late : memref<2xi64>)
  memref.copy %late, %idx : memref<2xi64> to memref<2xi64>
  return
}
