// RUN: etc-opt %s --etc-cpu-gemm-epilogue-rows=min-ops=3 | filecheck %s
// RUN: etc-opt %s --etc-cpu-gemm-epilogue-rows | filecheck %s --check-prefix=NEVER

// min-ops=0 (the default: an ISA row that keeps every epilogue in registers) changes nothing.
// NEVER-NOT: memref.alloca
// NEVER-NOT: vector<16xf32>

// A 2 x 16 register tile (as the GEMM tiling leaves it, bufferized) whose epilogue is three
// elementwise ops: the accumulator and the residual tile it adds go to stack buffers in front of
// the loop nest, then a loop over the 2 rows reads one row of each, applies the epilogue to
// vector<16> (the splat constant made row-wide) and stores the row at row i + r of C.
// CHECK-LABEL: func.func @long_epilogue(
// CHECK-SAME: %[[A:[a-z0-9]+]]: memref<2x8xf32>, %[[B:[a-z0-9]+]]: memref<8x16xf32>, %[[R:[a-z0-9]+]]: memref<4x16xf32>, %[[C:[a-z0-9]+]]: memref<4x16xf32>, %[[I:[a-z0-9]+]]: index
// CHECK-DAG: %[[ACC:.*]] = memref.alloca() {alignment = 64 : i64} : memref<2x16xf32>
// CHECK-DAG: %[[RES:.*]] = memref.alloca() {alignment = 64 : i64} : memref<2x16xf32>
// CHECK: scf.for
// CHECK: %[[TILE:.*]] = scf.for {{.*}} -> (vector<2x16xf32>)
// CHECK: } {etc.cpu.gemm_k_loop}
// CHECK: %[[RT:.*]] = vector.transfer_read %[[R]][%[[I]], %{{.*}}]{{.*}} : memref<4x16xf32>, vector<2x16xf32>
// CHECK: %[[HALF:.*]] = arith.constant dense<5.000000e-01> : vector<16xf32>
// CHECK-DAG: vector.transfer_write %[[TILE]], %[[ACC]][%{{.*}}, %{{.*}}] {in_bounds = [true, true]} : vector<2x16xf32>, memref<2x16xf32>
// CHECK-DAG: vector.transfer_write %[[RT]], %[[RES]][%{{.*}}, %{{.*}}] {in_bounds = [true, true]} : vector<2x16xf32>, memref<2x16xf32>
// CHECK: scf.for %[[ROW:.*]] = %{{.*}} to %{{.*}} step
// CHECK-DAG: %[[X:.*]] = vector.transfer_read %[[ACC]][%[[ROW]], %{{.*}}]{{.*}} : memref<2x16xf32>, vector<16xf32>
// CHECK-DAG: %[[Y:.*]] = vector.transfer_read %[[RES]][%[[ROW]], %{{.*}}]{{.*}} : memref<2x16xf32>, vector<16xf32>
// CHECK: %[[N:.*]] = arith.negf %[[X]] : vector<16xf32>
// CHECK: %[[S:.*]] = arith.addf %[[N]], %[[Y]] : vector<16xf32>
// CHECK: %[[M:.*]] = arith.mulf %[[S]], %[[HALF]] fastmath<contract> : vector<16xf32>
// CHECK: %[[AT:.*]] = arith.addi %[[I]], %[[ROW]] : index
// CHECK: vector.transfer_write %[[M]], %[[C]][%[[AT]], %{{.*}}] {in_bounds = [true]} : vector<16xf32>, memref<4x16xf32>
// CHECK-NOT: vector<2x16xf32>, memref<4x16xf32>
// CHECK: return
func.func @long_epilogue(%a: memref<2x8xf32>, %b: memref<8x16xf32>, %r: memref<4x16xf32>, %c: memref<4x16xf32>, %i: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %f0 = arith.constant 0.0 : f32
  %half = arith.constant dense<0.5> : vector<2x16xf32>
  %zero = arith.constant dense<0.0> : vector<2x16xf32>
  scf.for %n = %c0 to %c1 step %c1 {
    %acc = scf.for %k = %c0 to %c8 step %c1 iter_args(%t = %zero) -> (vector<2x16xf32>) {
      %col = vector.transfer_read %a[%c0, %k], %f0 {in_bounds = [true, true]} : memref<2x8xf32>, vector<2x1xf32>
      %row = vector.transfer_read %b[%k, %c0], %f0 {in_bounds = [true, true]} : memref<8x16xf32>, vector<1x16xf32>
      %x = vector.broadcast %col : vector<2x1xf32> to vector<16x2x1xf32>
      %s = arith.addf %t, %t : vector<2x16xf32>
      scf.yield %s : vector<2x16xf32>
    } {etc.cpu.gemm_k_loop}
    %res = vector.transfer_read %r[%i, %c0], %f0 {in_bounds = [true, true]} : memref<4x16xf32>, vector<2x16xf32>
    %neg = arith.negf %acc : vector<2x16xf32>
    %sum = arith.addf %neg, %res : vector<2x16xf32>
    %out = arith.mulf %sum, %half fastmath<contract> : vector<2x16xf32>
    vector.transfer_write %out, %c[%i, %c0] {in_bounds = [true, true]} : vector<2x16xf32>, memref<4x16xf32>
  }
  return
}

// Left in registers: an epilogue shorter than min-ops; one whose value is also read after the
// store; one stored under a mask (a partial column panel); a tile of one row.
// CHECK-LABEL: func.func @left_alone(
// CHECK-NOT: memref.alloca
// CHECK-NOT: vector<16xf32>
// CHECK: return
func.func @left_alone(%c: memref<4x16xf32>, %d: memref<4x16xf32>, %i: index, %m: vector<2x16xi1>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %zero = arith.constant dense<0.0> : vector<2x16xf32>
  %short = scf.for %k = %c0 to %c8 step %c1 iter_args(%t = %zero) -> (vector<2x16xf32>) {
    %s = arith.addf %t, %t : vector<2x16xf32>
    scf.yield %s : vector<2x16xf32>
  } {etc.cpu.gemm_k_loop}
  %n0 = arith.negf %short : vector<2x16xf32>
  %n1 = arith.negf %n0 : vector<2x16xf32>
  vector.transfer_write %n1, %c[%i, %c0] {in_bounds = [true, true]} : vector<2x16xf32>, memref<4x16xf32>
  %read = scf.for %k = %c0 to %c8 step %c1 iter_args(%t = %zero) -> (vector<2x16xf32>) {
    %s = arith.addf %t, %t : vector<2x16xf32>
    scf.yield %s : vector<2x16xf32>
  } {etc.cpu.gemm_k_loop}
  %r0 = arith.negf %read : vector<2x16xf32>
  %r1 = arith.negf %r0 : vector<2x16xf32>
  %r2 = arith.negf %r1 : vector<2x16xf32>
  vector.transfer_write %r2, %c[%i, %c0] {in_bounds = [true, true]} : vector<2x16xf32>, memref<4x16xf32>
  vector.transfer_write %r1, %d[%i, %c0] {in_bounds = [true, true]} : vector<2x16xf32>, memref<4x16xf32>
  %masked = scf.for %k = %c0 to %c8 step %c1 iter_args(%t = %zero) -> (vector<2x16xf32>) {
    %s = arith.addf %t, %t : vector<2x16xf32>
    scf.yield %s : vector<2x16xf32>
  } {etc.cpu.gemm_k_loop}
  %m0 = arith.negf %masked : vector<2x16xf32>
  %m1 = arith.negf %m0 : vector<2x16xf32>
  %m2 = arith.negf %m1 : vector<2x16xf32>
  vector.transfer_write %m2, %c[%i, %c0], %m {in_bounds = [true, true]} : vector<2x16xf32>, memref<4x16xf32>
  %one_zero = arith.constant dense<0.0> : vector<1x16xf32>
  %one = scf.for %k = %c0 to %c8 step %c1 iter_args(%t = %one_zero) -> (vector<1x16xf32>) {
    %s = arith.addf %t, %t : vector<1x16xf32>
    scf.yield %s : vector<1x16xf32>
  } {etc.cpu.gemm_k_loop}
  %o0 = arith.negf %one : vector<1x16xf32>
  %o1 = arith.negf %o0 : vector<1x16xf32>
  %o2 = arith.negf %o1 : vector<1x16xf32>
  vector.transfer_write %o2, %c[%i, %c0] {in_bounds = [true, true]} : vector<1x16xf32>, memref<4x16xf32>
  return
}
