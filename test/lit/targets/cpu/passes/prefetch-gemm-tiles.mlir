// RUN: etc-opt %s --etc-cpu-prefetch-gemm-tiles | filecheck %s
// RUN: etc-opt %s --etc-cpu-prefetch-gemm-tiles=f32-tiles=false | filecheck %s --check-prefix=NOF32

// An ISA row without f32 tile prefetches (AVX2: they make its 12-FMA k step issue-bound) keeps
// only the int8 kernel's, and records no decision about the f32 tiles' next panels.
// NOF32-NOT: etc.cpu.decisions
// NOF32-NOT: memref.prefetch
// NOF32-LABEL: func.func @int8_rows(
// NOF32: memref.prefetch
// NOF32-NOT: memref.prefetch

// The one decision recorded (by @dynamic_row_blocks at the end), on the module:
// CHECK: module attributes {etc.cpu.decisions = [{kind = "prefetch", op = "scf.for", path = "no-next-panel", reason = "a packed weight's next panel is not prefetched: the row blocks' loop bounds are not constants", where = "{{.*}}prefetch-gemm-tiles.mlir:{{[0-9]+}}:{{[0-9]+}}"}]}

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
// CHECK: %[[LAST:.*]] = arith.constant 7 : index
// CHECK: %[[C16:.*]] = arith.constant 16 : index
// CHECK: %[[PAST:.*]] = arith.addi %[[K]], %[[C16]]
// CHECK: %[[AHEAD:.*]] = arith.minui %[[PAST]], %[[LAST]]
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

// A packed weight (a function argument [panels, K, nr], contiguous) read by the k loops of two
// row blocks of 6 rows (the loop around reads A at its variable): besides the rows 16 ahead (into
// L1, clamped to the last row, 7), each k step prefetches (into L2, locality 2) one line of the
// next panel, 8 k rows further (the loop's length): row block r at step s the line r*8 + s
// (S = 2 lines x 8 rows / 2 blocks), at offset row*32 + panel*256 + line*16 of the weight seen
// flat (a collapse_shape at the function's entry), clamped to its last element (511: the last
// panel's next one is past the weight's end). A K block's k loop (the row read at kb + k) gets
// the same prefetches, its rows moved back to the block's start before moving on.
// CHECK-LABEL: func.func @packed_panels(
// CHECK-SAME: %[[A:[a-z0-9]+]]: memref<12x8xf32>, %[[B:[a-z0-9]+]]: memref<2x8x32xf32>, %[[JB:[a-z0-9]+]]: index
// CHECK: %[[FLAT:.*]] = memref.collapse_shape %[[B]] {{\[}}[0, 1, 2]] : memref<2x8x32xf32> into memref<512xf32>
// CHECK: scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK: scf.for %[[K:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args
// CHECK: %[[PAST:.*]] = arith.addi %[[K]], %{{.*}}
// CHECK: %[[AHEAD:.*]] = arith.minui %[[PAST]], %c7
// CHECK: memref.prefetch %[[B]][%[[JB]], %[[AHEAD]], %{{.*}}], read, locality<3>, data
// CHECK: memref.prefetch %[[B]][%[[JB]], %[[AHEAD]], %{{.*}}], read, locality<3>, data
// CHECK: %[[BLOCK:.*]] = arith.divui %{{.*}}, %c6
// CHECK: %[[STEP:.*]] = arith.subi %[[K]], %{{.*}}
// CHECK: %[[R8:.*]] = arith.muli %[[BLOCK]], %c8
// CHECK: %[[S1:.*]] = arith.muli %[[STEP]], %c1
// CHECK: %[[LINE:.*]] = arith.addi %[[R8]], %[[S1]]
// CHECK: %[[BACK:.*]] = arith.subi %[[K]], %[[STEP]]
// CHECK: %[[ROW:.*]] = arith.addi %[[BACK]], %c8
// CHECK: %[[ROWAT:.*]] = arith.muli %[[ROW]], %c32
// CHECK: %[[PANELAT:.*]] = arith.muli %[[JB]], %c256
// CHECK: %[[BASE:.*]] = arith.addi %[[ROWAT]], %[[PANELAT]]
// CHECK: %[[COL:.*]] = arith.muli %[[LINE]], %c16
// CHECK: %[[AT:.*]] = arith.addi %[[BASE]], %[[COL]]
// CHECK: %[[IN:.*]] = arith.minui %[[AT]], %c511
// CHECK: memref.prefetch %[[FLAT]][%[[IN]]], read, locality<2>, data
// CHECK-NOT: memref.prefetch
// CHECK: vector.transfer_read %[[B]]
// CHECK: {etc.cpu.gemm_k_loop}
// CHECK: scf.for %[[KB:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args
// CHECK: %[[KK:.*]] = affine.apply #{{.*}}()[%{{.*}}, %[[KB]]]
// CHECK: %[[PAST2:.*]] = arith.addi %[[KK]], %{{.*}}
// CHECK: %[[AHEAD2:.*]] = arith.minui %[[PAST2]], %c7
// CHECK: memref.prefetch %[[B]][%[[JB]], %[[AHEAD2]], %{{.*}}], read, locality<3>, data
// CHECK: memref.prefetch %[[B]][%[[JB]], %[[AHEAD2]], %{{.*}}], read, locality<3>, data
// CHECK: memref.prefetch %[[FLAT]][%{{.*}}], read, locality<2>, data
// CHECK-NOT: memref.prefetch
// CHECK: {etc.cpu.gemm_k_loop}
func.func @packed_panels(%a: memref<12x8xf32>, %b: memref<2x8x32xf32>, %jb: index, %c: memref<12x32xf32>,
                         %kb: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c6 = arith.constant 6 : index
  %c8 = arith.constant 8 : index
  %c12 = arith.constant 12 : index
  %z = arith.constant dense<0.0> : vector<6x32xf32>
  %f = arith.constant 0.0 : f32
  scf.for %i = %c0 to %c12 step %c6 {
    %acc = scf.for %k = %c0 to %c8 step %c1 iter_args(%v = %z) -> (vector<6x32xf32>) {
      %col = vector.transfer_read %a[%i, %k], %f {in_bounds = [true, true]} : memref<12x8xf32>, vector<6x1xf32>
      %row = vector.transfer_read %b[%jb, %k, %c0], %f {in_bounds = [true, true]} : memref<2x8x32xf32>, vector<1x32xf32>
      %y = vector.broadcast %row : vector<1x32xf32> to vector<6x32xf32>
      %s = arith.addf %v, %y : vector<6x32xf32>
      scf.yield %s : vector<6x32xf32>
    } {etc.cpu.gemm_k_loop}
    vector.transfer_write %acc, %c[%i, %c0] {in_bounds = [true, true]} : vector<6x32xf32>, memref<12x32xf32>
    %acc2 = scf.for %k = %c0 to %c4 step %c1 iter_args(%v = %z) -> (vector<6x32xf32>) {
      %kk = affine.apply affine_map<()[s0, s1] -> (s0 + s1)>()[%kb, %k]
      %col = vector.transfer_read %a[%i, %kk], %f {in_bounds = [true, true]} : memref<12x8xf32>, vector<6x1xf32>
      %row = vector.transfer_read %b[%jb, %kk, %c0], %f {in_bounds = [true, true]} : memref<2x8x32xf32>, vector<1x32xf32>
      %y = vector.broadcast %row : vector<1x32xf32> to vector<6x32xf32>
      %s = arith.addf %v, %y : vector<6x32xf32>
      scf.yield %s : vector<6x32xf32>
    } {etc.cpu.gemm_k_loop}
    vector.transfer_write %acc2, %c[%i, %c0] {in_bounds = [true, true]} : vector<6x32xf32>, memref<12x32xf32>
  }
  return
}

// A k loop over a packed weight with no row-block loop around it (here the function's body: one
// row block's worth of rows): the next-panel prefetch does not apply (it spreads a panel's lines
// over the row blocks) and nothing is recorded; the rows ahead are still prefetched.
// CHECK-LABEL: func.func @no_row_blocks(
// CHECK: scf.for
// CHECK: memref.prefetch %{{.*}}, read, locality<3>, data
// CHECK-NOT: locality<2>
// CHECK: {etc.cpu.gemm_k_loop}
func.func @no_row_blocks(%a: memref<6x8xf32>, %b: memref<2x8x32xf32>, %jb: index, %c: memref<6x32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %z = arith.constant dense<0.0> : vector<6x32xf32>
  %f = arith.constant 0.0 : f32
  %acc = scf.for %k = %c0 to %c8 step %c1 iter_args(%v = %z) -> (vector<6x32xf32>) {
    %col = vector.transfer_read %a[%c0, %k], %f {in_bounds = [true, true]} : memref<6x8xf32>, vector<6x1xf32>
    %row = vector.transfer_read %b[%jb, %k, %c0], %f {in_bounds = [true, true]} : memref<2x8x32xf32>, vector<1x32xf32>
    %y = vector.broadcast %row : vector<1x32xf32> to vector<6x32xf32>
    %s = arith.addf %v, %y : vector<6x32xf32>
    scf.yield %s : vector<6x32xf32>
  } {etc.cpu.gemm_k_loop}
  vector.transfer_write %acc, %c[%c0, %c0] {in_bounds = [true, true]} : vector<6x32xf32>, memref<6x32xf32>
  return
}

// Row blocks over a dynamic row count: the next panel's lines cannot be spread over a number of
// row blocks known only at run time, so the prefetch is not placed and the module records why
// (`etc.cpu.decisions`, a NOT TUNED line of the delegation report: checked at the top, the
// module's attributes print first).
// CHECK-LABEL: func.func @dynamic_row_blocks(
// CHECK-NOT: locality<2>
// CHECK: {etc.cpu.gemm_k_loop}
func.func @dynamic_row_blocks(%a: memref<?x8xf32>, %b: memref<2x8x32xf32>, %jb: index, %n: index,
                              %c: memref<?x32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c6 = arith.constant 6 : index
  %c8 = arith.constant 8 : index
  %z = arith.constant dense<0.0> : vector<6x32xf32>
  %f = arith.constant 0.0 : f32
  scf.for %r = %c0 to %n step %c6 {
    %acc = scf.for %k = %c0 to %c8 step %c1 iter_args(%v = %z) -> (vector<6x32xf32>) {
      %col = vector.transfer_read %a[%r, %k], %f {in_bounds = [true, true]} : memref<?x8xf32>, vector<6x1xf32>
      %row = vector.transfer_read %b[%jb, %k, %c0], %f {in_bounds = [true, true]} : memref<2x8x32xf32>, vector<1x32xf32>
      %y = vector.broadcast %row : vector<1x32xf32> to vector<6x32xf32>
      %s = arith.addf %v, %y : vector<6x32xf32>
      scf.yield %s : vector<6x32xf32>
    } {etc.cpu.gemm_k_loop}
    vector.transfer_write %acc, %c[%r, %c0] {in_bounds = [true, true]} : vector<6x32xf32>, memref<?x32xf32>
  }
  return
}

// A weight as A (a convolution's filter [F, C]: 12 filters, K = 8) read one column of the tile's
// 6 rows per k step, the k loop over the whole row: each k step prefetches (into L1) the element
// 6 further along the next tile's rows, which follow these in memory: ((i + 6) mod 12) * 8 + 6k
// of the weight seen flat, clamped to its last element (95). After the last tile the rows wrap to
// the first (the next column panel's). A K block's k loop (a part of the row) and a loop that
// reads the column of an operand that is not a function argument are left alone.
// CHECK-LABEL: func.func @weight_rows(
// CHECK-SAME: %[[W:[a-z0-9]+]]: memref<12x8xf32>
// CHECK: %[[FLAT:.*]] = memref.collapse_shape %[[W]] {{\[}}[0, 1]] : memref<12x8xf32> into memref<96xf32>
// CHECK: scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK: %[[PAST:.*]] = arith.addi %[[I]], %c6
// CHECK: %[[NEXT:.*]] = arith.remui %[[PAST]], %c12
// CHECK: %[[START:.*]] = arith.muli %[[NEXT]], %c8
// CHECK: scf.for %[[K:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args
// CHECK: %[[ALONG:.*]] = arith.muli %[[K]], %c6
// CHECK: %[[AT:.*]] = arith.addi %[[START]], %[[ALONG]]
// CHECK: %[[IN:.*]] = arith.minui %[[AT]], %c95
// CHECK: memref.prefetch %[[FLAT]][%[[IN]]], read, locality<3>, data
// CHECK-NEXT: vector.transfer_read %[[W]][%[[I]], %[[K]]]
// CHECK: {etc.cpu.gemm_k_loop}
// CHECK: scf.for
// CHECK-NOT: memref.prefetch %[[FLAT]]
// CHECK: {etc.cpu.gemm_k_loop}
// CHECK: scf.for
// CHECK-NOT: memref.prefetch
// CHECK: {etc.cpu.gemm_k_loop}
func.func @weight_rows(%w: memref<12x8xf32>, %b: memref<8x32xf32>, %c: memref<12x32xf32>, %kb: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c6 = arith.constant 6 : index
  %c8 = arith.constant 8 : index
  %c12 = arith.constant 12 : index
  %z = arith.constant dense<0.0> : vector<6x32xf32>
  %f = arith.constant 0.0 : f32
  scf.for %i = %c0 to %c12 step %c6 {
    %acc = scf.for %k = %c0 to %c8 step %c1 iter_args(%v = %z) -> (vector<6x32xf32>) {
      %col = vector.transfer_read %w[%i, %k], %f {in_bounds = [true, true]} : memref<12x8xf32>, vector<6x1xf32>
      %y = vector.broadcast %col : vector<6x1xf32> to vector<32x6x1xf32>
      scf.yield %v : vector<6x32xf32>
    } {etc.cpu.gemm_k_loop}
    vector.transfer_write %acc, %c[%i, %c0] {in_bounds = [true, true]} : vector<6x32xf32>, memref<12x32xf32>
    %acc2 = scf.for %k = %c0 to %c4 step %c1 iter_args(%v = %z) -> (vector<6x32xf32>) {
      %kk = affine.apply affine_map<()[s0, s1] -> (s0 + s1)>()[%kb, %k]
      %col = vector.transfer_read %w[%i, %kk], %f {in_bounds = [true, true]} : memref<12x8xf32>, vector<6x1xf32>
      %y = vector.broadcast %col : vector<6x1xf32> to vector<32x6x1xf32>
      scf.yield %v : vector<6x32xf32>
    } {etc.cpu.gemm_k_loop}
    vector.transfer_write %acc2, %c[%i, %c0] {in_bounds = [true, true]} : vector<6x32xf32>, memref<12x32xf32>
    %t = memref.alloca() : memref<12x8xf32>
    %acc3 = scf.for %k = %c0 to %c8 step %c1 iter_args(%v = %z) -> (vector<6x32xf32>) {
      %col = vector.transfer_read %t[%i, %k], %f {in_bounds = [true, true]} : memref<12x8xf32>, vector<6x1xf32>
      %y = vector.broadcast %col : vector<6x1xf32> to vector<32x6x1xf32>
      scf.yield %v : vector<6x32xf32>
    } {etc.cpu.gemm_k_loop}
    vector.transfer_write %acc3, %c[%i, %c0] {in_bounds = [true, true]} : vector<6x32xf32>, memref<12x32xf32>
  }
  return
}

// The int8 kernel's k loop (marked `etc.cpu.int8_k_loop`) over a tile of 2 filter rows: each k
// step reads a 4-byte group of each row of the packed filter seen as rows A [12, 20] (a function
// argument; the group at [row, kb * 4]) and a 64-byte row of B. Only A's next row tile is prefetched: one byte per step, 2 * 4 bytes
// apart, from the start of rows (i + 2) mod 12 of A seen flat, clamped to its last byte; B's
// rows (64-byte groups, not A's 4) and the stores get nothing.
// CHECK-LABEL: func.func @int8_rows(
// CHECK-SAME: %[[A:[a-z0-9]+]]: memref<12x20xi8>
// CHECK: %[[FLAT:.*]] = memref.collapse_shape %[[A]] {{\[}}[0, 1]] : memref<12x20xi8> into memref<240xi8>
// CHECK: %[[NEXT:.*]] = arith.remui %{{.*}}, %{{.*}} : index
// CHECK: %[[START:.*]] = arith.muli %[[NEXT]], %{{.*}} : index
// CHECK: scf.for %[[K:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args
// CHECK: %[[K4:.*]] = arith.muli %[[K]], %{{.*}} : index
// CHECK: %[[STEP:.*]] = arith.muli %[[K]], %{{.*}} : index
// CHECK: %[[AT:.*]] = arith.addi %[[START]], %[[STEP]] : index
// CHECK: %[[CLAMPED:.*]] = arith.minui %[[AT]], %{{.*}} : index
// CHECK: memref.prefetch %[[FLAT]][%[[CLAMPED]]], read, locality<3>, data
// CHECK-NOT: memref.prefetch
// CHECK: {etc.cpu.int8_k_loop}
// CHECK-NOT: memref.prefetch
// CHECK: return
func.func @int8_rows(%a: memref<12x20xi8>, %b: memref<1x5x64xi8>, %c: memref<12x16xi8>, %i: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c5 = arith.constant 5 : index
  %p = arith.constant 0 : i8
  %z = arith.constant dense<0> : vector<16xi32>
  %i1 = arith.addi %i, %c1 : index
  %acc:2 = scf.for %k = %c0 to %c5 step %c1 iter_args(%v0 = %z, %v1 = %z) -> (vector<16xi32>, vector<16xi32>) {
    %bk = vector.transfer_read %b[%c0, %k, %c0], %p {in_bounds = [true]} : memref<1x5x64xi8>, vector<64xi8>
    %k4 = arith.muli %k, %c4 : index
    %a0 = vector.transfer_read %a[%i, %k4], %p {in_bounds = [true]} : memref<12x20xi8>, vector<4xi8>
    %a1 = vector.transfer_read %a[%i1, %k4], %p {in_bounds = [true]} : memref<12x20xi8>, vector<4xi8>
    %w0 = vector.bitcast %a0 : vector<4xi8> to vector<1xi32>
    %w1 = vector.bitcast %a1 : vector<4xi8> to vector<1xi32>
    %s0 = vector.extract %w0[0] : i32 from vector<1xi32>
    %s1 = vector.extract %w1[0] : i32 from vector<1xi32>
    %b0 = vector.broadcast %s0 : i32 to vector<16xi32>
    %b1 = vector.broadcast %s1 : i32 to vector<16xi32>
    %d0 = arith.addi %v0, %b0 : vector<16xi32>
    %d1 = arith.addi %v1, %b1 : vector<16xi32>
    scf.yield %d0, %d1 : vector<16xi32>, vector<16xi32>
  } {etc.cpu.int8_k_loop}
  %t0 = arith.trunci %acc#0 : vector<16xi32> to vector<16xi8>
  vector.transfer_write %t0, %c[%i, %c0] {in_bounds = [true]} : vector<16xi8>, memref<12x16xi8>
  return
}

