// RUN: etc-opt %s --split-input-file --etc-cpu-split-threads | filecheck %s

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

// -----

// Straight-line work with effects runs on thread 0 under one guard and barrier. A value it reads
// that the next loop nest also uses (a scalar broadcast into it) is read again by every thread
// after the barrier, where thread 0's store is visible: the loop uses that read.
// CHECK-LABEL: func.func @reread
// CHECK: scf.if
// CHECK-NEXT: memref.load %arg1[]
// CHECK-NEXT: memref.store
// CHECK-NEXT: memref.load %arg2[]
// CHECK-NEXT: }
// CHECK-NEXT: call @etc_cpu_barrier
// CHECK-NEXT: %[[AGAIN:.*]] = memref.load %arg2[]
// CHECK: scf.for
// CHECK: arith.addf %{{.*}}, %[[AGAIN]]
// CHECK: } {etc.thread_split}
func.func @reread(%x: memref<64xf32> {etc.cpu.arg = "input:0", llvm.noalias}, %s: memref<f32> {etc.cpu.arg = "input:1", llvm.noalias},
                  %acc: memref<f32> {etc.cpu.arg = "output:0", llvm.noalias}, %out: memref<64xf32> {etc.cpu.arg = "output:1", llvm.noalias}) {
  %v = memref.load %s[] : memref<f32>
  memref.store %v, %acc[] : memref<f32>
  %w = memref.load %acc[] : memref<f32>
  linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>], iterator_types = ["parallel"]} ins(%x : memref<64xf32>) outs(%out : memref<64xf32>) {
  ^bb0(%a: f32, %b: f32):
    %m = arith.addf %a, %w : f32
    linalg.yield %m : f32
  }
  return
}

// -----

// A vector made from constants (a row kernel's tail mask, hoisted by canonicalization to the top
// level between effectful work and the nest that uses it) is a constant every thread computes, as
// index math is: not work for thread 0 (found by the compiler fuzzer: "'vector.constant_mask' runs
// on one thread but its result is used after it", a compile error for an int8 LayerNorm on two threads).
// CHECK-LABEL: func.func @hoisted_mask
// CHECK: scf.if
// CHECK-NEXT: memref.load %arg1[]
// CHECK-NEXT: memref.store
// CHECK-NEXT: }
// CHECK-NEXT: call @etc_cpu_barrier
// CHECK-NEXT: %[[MASK:.*]] = vector.constant_mask [5] : vector<8xi1>
// CHECK: scf.for
// CHECK: arith.select %[[MASK]]
// CHECK: } {etc.thread_split}
func.func @hoisted_mask(%x: memref<4x8xf32> {etc.cpu.arg = "input:0", llvm.noalias}, %s: memref<f32> {etc.cpu.arg = "input:1", llvm.noalias},
                        %acc: memref<f32> {etc.cpu.arg = "output:0", llvm.noalias}, %out: memref<4x8xf32> {etc.cpu.arg = "output:1", llvm.noalias}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %f = arith.constant 0.0 : f32
  %z = arith.constant dense<0.0> : vector<8xf32>
  %v = memref.load %s[] : memref<f32>
  memref.store %v, %acc[] : memref<f32>
  %mask = vector.constant_mask [5] : vector<8xi1>
  scf.for %i = %c0 to %c4 step %c1 {
    %r = vector.transfer_read %x[%i, %c0], %f {in_bounds = [true]} : memref<4x8xf32>, vector<8xf32>
    %y = arith.select %mask, %r, %z : vector<8xi1>, vector<8xf32>
    vector.transfer_write %y, %out[%i, %c0] {in_bounds = [true]} : vector<8xf32>, memref<4x8xf32>
  } {etc.thread_split}
  return
}

// -----

// What a dynamic model reads on thread 0 and uses after it: a size it loaded, the view at that
// size and the view's dim. Every thread repeats the chain after the barrier, in order, and the
// loop nest uses the repeated values. (The sizes are read only: a read of a buffer the run writes
// after it is an error, split-threads-errors.mlir.)
// CHECK-LABEL: func.func @resize
// CHECK: scf.if
// CHECK: memref.store
// CHECK: call @etc_cpu_barrier
// CHECK-NEXT: %[[N:.*]] = memref.load %arg2[%{{.*}}] : memref<1xindex>
// CHECK-NEXT: %[[V:.*]] = memref.reinterpret_cast %arg0 to offset: [0], sizes: [%[[N]]]
// CHECK-NEXT: %[[D:.*]] = memref.dim %[[V]]
// CHECK: scf.for
// CHECK: arith.index_cast %[[D]]
// CHECK: } {etc.thread_split}
func.func @resize(%x: memref<64xf32> {etc.cpu.arg = "input:0", llvm.noalias}, %out: memref<64xf32> {etc.cpu.arg = "output:0", llvm.noalias},
                  %dims: memref<1xindex> {etc.cpu.arg = "dims:in", llvm.noalias}, %first: memref<f32> {etc.cpu.arg = "output:1", llvm.noalias}) {
  %c0 = arith.constant 0 : index
  %n = memref.load %dims[%c0] : memref<1xindex>
  %v = memref.reinterpret_cast %x to offset: [0], sizes: [%n], strides: [1] : memref<64xf32> to memref<?xf32>
  %d = memref.dim %v, %c0 : memref<?xf32>
  %a = memref.load %v[%c0] : memref<?xf32>
  memref.store %a, %first[] : memref<f32>
  linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>], iterator_types = ["parallel"]} ins(%x : memref<64xf32>) outs(%out : memref<64xf32>) {
  ^bb0(%in: f32, %b: f32):
    %i = arith.index_cast %d : index to i64
    %f = arith.sitofp %i : i64 to f32
    %m = arith.addf %in, %f : f32
    linalg.yield %m : f32
  }
  return
}

// -----

// A cond in the delegate yields one buffer or the other (found by the compiler fuzzer: this was
// "'scf.if' runs on one thread but its result is used after it"). The branches' writes run on
// thread 0; after the barrier every thread selects the same buffer again (a copy of the scf.if
// with only the ops its yields need), and the loop nest reads that selection.
// CHECK-LABEL: func.func @cond_result
// CHECK: scf.if
// CHECK: %[[FIRST:.*]] = scf.if %{{.*}} -> (memref<64xf32>)
// CHECK: memref.store
// CHECK: scf.yield %arg1
// CHECK: memref.store
// CHECK: scf.yield %arg2
// CHECK: call @etc_cpu_barrier
// CHECK-NEXT: %[[P:.*]] = memref.load %arg3[]
// CHECK-NEXT: %[[AGAIN:.*]] = scf.if %[[P]] -> (memref<64xf32>) {
// CHECK-NEXT: scf.yield %arg1
// CHECK-NEXT: } else {
// CHECK-NEXT: scf.yield %arg2
// CHECK-NEXT: }
// CHECK: scf.for
// CHECK: memref.load %[[AGAIN]]
// CHECK: } {etc.thread_split}
func.func @cond_result(%x: memref<64xf32> {etc.cpu.arg = "input:0", llvm.noalias}, %a: memref<64xf32> {etc.cpu.arg = "scratch:0", llvm.noalias},
                       %b: memref<64xf32> {etc.cpu.arg = "scratch:256", llvm.noalias}, %p: memref<i1> {etc.cpu.arg = "input:1", llvm.noalias},
                       %out: memref<64xf32> {etc.cpu.arg = "output:0", llvm.noalias}) {
  %c0 = arith.constant 0 : index
  %z = arith.constant 0.0 : f32
  %pred = memref.load %p[] : memref<i1>
  %r = scf.if %pred -> (memref<64xf32>) {
    memref.store %z, %a[%c0] : memref<64xf32>
    scf.yield %a : memref<64xf32>
  } else {
    memref.store %z, %b[%c0] : memref<64xf32>
    scf.yield %b : memref<64xf32>
  }
  linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>], iterator_types = ["parallel"]} ins(%r : memref<64xf32>) outs(%out : memref<64xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  }
  return
}

// -----

// Of the marked loops of a perfect nest, the threads share the outermost that divides evenly
// enough (at most 10% of the time idle): a GEMM over 14x14 pixels has 3 column panels (2 and 1
// on two threads: 25% idle) and 96 row tiles, so every thread runs the 3 panels and takes its
// chunk of the rows. Its batch of 12 heads (the attention's) divides evenly: the heads are shared.
// CHECK-LABEL: func.func @few_panels
// CHECK: scf.for %{{.*}} = %c0 to %c192 step %c64 {
// CHECK: arith.ceildivsi %{{.*}}, %arg4 : index
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c6 {
// CHECK: } {etc.thread_split}
// CHECK-NEXT: } {etc.thread_split}
// CHECK-NEXT: call @etc_cpu_barrier
// CHECK: arith.ceildivsi %{{.*}}, %arg4 : index
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c1 {
// CHECK-NEXT: scf.for %{{.*}} = %c0 to %c192 step %c64 {
// CHECK: call @etc_cpu_barrier
func.func @few_panels(%x: memref<576x196xf32> {etc.cpu.arg = "input:0", llvm.noalias}, %out: memref<12x576x196xf32> {etc.cpu.arg = "output:0", llvm.noalias}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c6 = arith.constant 6 : index
  %c12 = arith.constant 12 : index
  %c64 = arith.constant 64 : index
  %c192 = arith.constant 192 : index
  %c576 = arith.constant 576 : index
  scf.for %p = %c0 to %c192 step %c64 {
    scf.for %r = %c0 to %c576 step %c6 {
      %v = memref.load %x[%r, %p] : memref<576x196xf32>
      memref.store %v, %out[%c0, %r, %p] : memref<12x576x196xf32>
    } {etc.thread_split}
  } {etc.thread_split}
  scf.for %b = %c0 to %c12 step %c1 {
    scf.for %p = %c0 to %c192 step %c64 {
      %v = memref.load %x[%c0, %p] : memref<576x196xf32>
      memref.store %v, %out[%b, %c0, %p] : memref<12x576x196xf32>
    } {etc.thread_split}
  } {etc.thread_split}
  return
}

// -----

// A loop nest with no loop its threads may share runs on thread 0, and the report says so.
// CHECK: etc.cpu.decisions = [{kind = "threads", op = "scf.for", path = "one-thread", reason = "a loop nest runs on thread 0: no loop of the nest is marked etc.thread_split (independent iterations)"{{.*}}}]
// CHECK-LABEL: func.func @unmarked
// CHECK: scf.if
// CHECK-NEXT: scf.for
func.func @unmarked(%x: memref<64xf32> {etc.cpu.arg = "input:0", llvm.noalias}, %out: memref<64xf32> {etc.cpu.arg = "output:0", llvm.noalias}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c63 = arith.constant 63 : index
  scf.for %i = %c0 to %c63 step %c1 {
    %n = arith.addi %i, %c1 : index
    %v = memref.load %out[%i] : memref<64xf32>
    memref.store %v, %out[%n] : memref<64xf32>
  }
  return
}

// -----

// A GEMM panel's peeled partial row block beside its row loop (rows 0..155 in tiles of 6, then
// rows 156..159): the rest writes only rows the loop never writes and reads nothing either
// writes, so the threads share the row tiles (3 panels would leave one thread idle a quarter of
// the time) and the last thread alone runs the rest, in each panel, with no barrier in between.
// CHECK-LABEL: func.func @row_rest
// CHECK: scf.for %{{.*}} = %c0 to %c192 step %c64 {
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c6 {
// CHECK: } {etc.thread_split}
// CHECK: %[[LAST:.*]] = arith.subi %arg4, %{{.*}} : index
// CHECK: %[[IS:.*]] = arith.cmpi eq, %arg3, %[[LAST]] : index
// CHECK: scf.if %[[IS]] {
// CHECK-NEXT: memref.load %arg0[%c156, %{{.*}}]
// CHECK-NEXT: memref.store %{{.*}}, %{{.*}}[%c156, %{{.*}}]
// CHECK: } {etc.thread_split}
// CHECK-NEXT: call @etc_cpu_barrier
func.func @row_rest(%x: memref<160x196xf32> {etc.cpu.arg = "input:0", llvm.noalias}, %out: memref<160x196xf32> {etc.cpu.arg = "output:0", llvm.noalias}) {
  %c0 = arith.constant 0 : index
  %c6 = arith.constant 6 : index
  %c64 = arith.constant 64 : index
  %c156 = arith.constant 156 : index
  %c192 = arith.constant 192 : index
  scf.for %p = %c0 to %c192 step %c64 {
    %view = memref.subview %out[0, %p] [160, 64] [1, 1] : memref<160x196xf32> to memref<160x64xf32, strided<[196, 1], offset: ?>>
    scf.for %r = %c0 to %c156 step %c6 {
      %v = memref.load %x[%r, %p] : memref<160x196xf32>
      memref.store %v, %view[%r, %c0] : memref<160x64xf32, strided<[196, 1], offset: ?>>
    } {etc.thread_split}
    %t = memref.load %x[%c156, %p] : memref<160x196xf32>
    memref.store %t, %view[%c156, %c0] : memref<160x64xf32, strided<[196, 1], offset: ?>>
  } {etc.thread_split}
  return
}

// -----

// The int8 kernel's form of the same: its row tiles write row by row (1-D vectors at [iv + c, ...],
// c within the step: rows iv .. iv + 5), and the left-over rows 156..159 past them. Proved
// alike: the threads share the row tiles, the last thread runs the rest.
// CHECK-LABEL: func.func @row_by_row_rest
// CHECK: scf.for %{{.*}} = %c0 to %c192 step %c64 {
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c6 {
// CHECK: } {etc.thread_split}
// CHECK: scf.if
// CHECK: vector.transfer_write %{{.*}}, %{{.*}}[%c156, %c0]
// CHECK: } {etc.thread_split}
func.func @row_by_row_rest(%x: memref<160x196xf32> {etc.cpu.arg = "input:0", llvm.noalias}, %out: memref<160x196xf32> {etc.cpu.arg = "output:0", llvm.noalias}) {
  %c0 = arith.constant 0 : index
  %c5 = arith.constant 5 : index
  %c6 = arith.constant 6 : index
  %c64 = arith.constant 64 : index
  %c156 = arith.constant 156 : index
  %c192 = arith.constant 192 : index
  %pad = arith.constant 0.0 : f32
  scf.for %p = %c0 to %c192 step %c64 {
    %view = memref.subview %out[0, %p] [160, 64] [1, 1] : memref<160x196xf32> to memref<160x64xf32, strided<[196, 1], offset: ?>>
    scf.for %r = %c0 to %c156 step %c6 {
      %v = vector.transfer_read %x[%r, %p], %pad : memref<160x196xf32>, vector<16xf32>
      vector.transfer_write %v, %view[%r, %c0] {in_bounds = [true]} : vector<16xf32>, memref<160x64xf32, strided<[196, 1], offset: ?>>
      %r5 = arith.addi %r, %c5 : index
      vector.transfer_write %v, %view[%r5, %c0] {in_bounds = [true]} : vector<16xf32>, memref<160x64xf32, strided<[196, 1], offset: ?>>
    } {etc.thread_split}
    %t = vector.transfer_read %x[%c156, %p], %pad : memref<160x196xf32>, vector<16xf32>
    vector.transfer_write %t, %view[%c156, %c0] {in_bounds = [true]} : vector<16xf32>, memref<160x64xf32, strided<[196, 1], offset: ?>>
  } {etc.thread_split}
  return
}

// -----

// Not a rest: a row tile writes past its step (row iv + 6, the next tile's first), so the nest
// stays split by panels.
// CHECK-LABEL: func.func @row_past_the_step
// CHECK-NOT: scf.if
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c64 {
// CHECK: scf.for %{{.*}} = %c0 to %c156 step %c6 {
func.func @row_past_the_step(%x: memref<160x196xf32> {etc.cpu.arg = "input:0", llvm.noalias}, %out: memref<162x196xf32> {etc.cpu.arg = "output:0", llvm.noalias}) {
  %c0 = arith.constant 0 : index
  %c6 = arith.constant 6 : index
  %c64 = arith.constant 64 : index
  %c156 = arith.constant 156 : index
  %c161 = arith.constant 161 : index
  %c192 = arith.constant 192 : index
  %pad = arith.constant 0.0 : f32
  scf.for %p = %c0 to %c192 step %c64 {
    %view = memref.subview %out[0, %p] [162, 64] [1, 1] : memref<162x196xf32> to memref<162x64xf32, strided<[196, 1], offset: ?>>
    scf.for %r = %c0 to %c156 step %c6 {
      %v = vector.transfer_read %x[%r, %p], %pad : memref<160x196xf32>, vector<16xf32>
      %r6 = arith.addi %r, %c6 : index
      vector.transfer_write %v, %view[%r6, %c0] {in_bounds = [true]} : vector<16xf32>, memref<162x64xf32, strided<[196, 1], offset: ?>>
    } {etc.thread_split}
    %t = vector.transfer_read %x[%c156, %p], %pad : memref<160x196xf32>, vector<16xf32>
    vector.transfer_write %t, %view[%c161, %c0] {in_bounds = [true]} : vector<16xf32>, memref<162x64xf32, strided<[196, 1], offset: ?>>
  } {etc.thread_split}
  return
}

// -----

// Not a rest: it reads the rows the loop writes (row 0), so the nest stays split by panels.
// CHECK-LABEL: func.func @dependent_rest
// CHECK-NOT: scf.if
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c64 {
// CHECK: scf.for %{{.*}} = %c0 to %c156 step %c6 {
func.func @dependent_rest(%x: memref<160x196xf32> {etc.cpu.arg = "input:0", llvm.noalias}, %out: memref<160x196xf32> {etc.cpu.arg = "output:0", llvm.noalias}) {
  %c0 = arith.constant 0 : index
  %c6 = arith.constant 6 : index
  %c64 = arith.constant 64 : index
  %c156 = arith.constant 156 : index
  %c192 = arith.constant 192 : index
  scf.for %p = %c0 to %c192 step %c64 {
    %view = memref.subview %out[0, %p] [160, 64] [1, 1] : memref<160x196xf32> to memref<160x64xf32, strided<[196, 1], offset: ?>>
    scf.for %r = %c0 to %c156 step %c6 {
      %v = memref.load %x[%r, %p] : memref<160x196xf32>
      memref.store %v, %view[%r, %c0] : memref<160x64xf32, strided<[196, 1], offset: ?>>
    } {etc.thread_split}
    %t = memref.load %view[%c0, %c0] : memref<160x64xf32, strided<[196, 1], offset: ?>>
    memref.store %t, %view[%c156, %c0] : memref<160x64xf32, strided<[196, 1], offset: ?>>
  } {etc.thread_split}
  return
}

// -----

// A partial panel's row tiles as the top-level loop, its peeled corner (rows 156..159, a k loop
// carrying its sum) after it at the top level: the corner writes rows the loop never writes and
// reads nothing it writes, so the last thread runs it beside the shared row tiles, before the
// nest's one barrier (not on thread 0 between two barriers, the other thread waiting).
// CHECK-LABEL: func.func @corner_beside
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c6 {
// CHECK: } {etc.thread_split}
// CHECK-NOT: call @etc_cpu_barrier
// CHECK: %[[LAST:.*]] = arith.subi %arg4, %{{.*}} : index
// CHECK: %[[IS:.*]] = arith.cmpi eq, %arg3, %[[LAST]] : index
// CHECK: scf.if %[[IS]] {
// CHECK-NEXT: scf.for
// CHECK: memref.store %{{.*}}, %{{.*}}[%c156, %c0]
// CHECK-NEXT: }
// CHECK-NEXT: call @etc_cpu_barrier
// CHECK-NOT: call @etc_cpu_barrier
// CHECK: return
func.func @corner_beside(%x: memref<160x196xf32> {etc.cpu.arg = "input:0", llvm.noalias}, %out: memref<160x196xf32> {etc.cpu.arg = "output:0", llvm.noalias}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c6 = arith.constant 6 : index
  %c156 = arith.constant 156 : index
  %c196 = arith.constant 196 : index
  %zero = arith.constant 0.0 : f32
  %view = memref.subview %out[0, 192] [160, 4] [1, 1] : memref<160x196xf32> to memref<160x4xf32, strided<[196, 1], offset: 192>>
  scf.for %r = %c0 to %c156 step %c6 {
    %v = memref.load %x[%r, %c0] : memref<160x196xf32>
    memref.store %v, %view[%r, %c0] : memref<160x4xf32, strided<[196, 1], offset: 192>>
  } {etc.thread_split}
  %sum = scf.for %k = %c0 to %c196 step %c1 iter_args(%acc = %zero) -> (f32) {
    %t = memref.load %x[%c156, %k] : memref<160x196xf32>
    %s = arith.addf %acc, %t : f32
    scf.yield %s : f32
  }
  memref.store %sum, %view[%c156, %c0] : memref<160x4xf32, strided<[196, 1], offset: 192>>
  return
}

// -----

// Not beside: the corner reads a row the loop writes (row 0 of the view), so it waits for the
// loop's barrier and runs on thread 0, with its own barrier after it.
// CHECK-LABEL: func.func @corner_dependent
// CHECK: } {etc.thread_split}
// CHECK-NEXT: call @etc_cpu_barrier
// CHECK-NEXT: %[[ZERO:.*]] = arith.constant 0 : index
// CHECK-NEXT: %[[IS:.*]] = arith.cmpi eq, %arg3, %[[ZERO]] : index
// CHECK-NEXT: scf.if %[[IS]] {
// CHECK-NEXT: scf.for {{.*}} iter_args
// CHECK: call @etc_cpu_barrier
func.func @corner_dependent(%x: memref<160x196xf32> {etc.cpu.arg = "input:0", llvm.noalias}, %out: memref<160x196xf32> {etc.cpu.arg = "output:0", llvm.noalias}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c6 = arith.constant 6 : index
  %c156 = arith.constant 156 : index
  %c196 = arith.constant 196 : index
  %zero = arith.constant 0.0 : f32
  %view = memref.subview %out[0, 192] [160, 4] [1, 1] : memref<160x196xf32> to memref<160x4xf32, strided<[196, 1], offset: 192>>
  scf.for %r = %c0 to %c156 step %c6 {
    %v = memref.load %x[%r, %c0] : memref<160x196xf32>
    memref.store %v, %view[%r, %c0] : memref<160x4xf32, strided<[196, 1], offset: 192>>
  } {etc.thread_split}
  %sum = scf.for %k = %c0 to %c196 step %c1 iter_args(%acc = %zero) -> (f32) {
    %t = memref.load %view[%c0, %c0] : memref<160x4xf32, strided<[196, 1], offset: 192>>
    %s = arith.addf %acc, %t : f32
    scf.yield %s : f32
  }
  memref.store %sum, %view[%c156, %c0] : memref<160x4xf32, strided<[196, 1], offset: 192>>
  return
}
