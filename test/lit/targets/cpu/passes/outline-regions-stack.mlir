// RUN: etc-opt %s --etc-cpu-outline-regions | filecheck %s

// A stack buffer only one nest uses (a GEMM kernel's panel buffer, etc-cpu-plan-scratch) moves
// into the nest's function with its constants: on that function's frame, released when it
// returns, not on the entry's for the whole model. A vector constant is cloned in too (no
// argument of vector type).
// CHECK-LABEL: func.func private @f_region0(%{{.*}}: memref<8x64xf32> {llvm.noalias})
// CHECK-DAG: memref.alloca() {alignment = 64 : i64} : memref<64xf32>
// CHECK-DAG: arith.constant dense<1.000000e+00> : vector<64xf32>
// CHECK: scf.for
// CHECK-LABEL: func.func @f(
// CHECK-NOT: memref.alloca
// CHECK: call @f_region0(%arg0)
func.func @f(%y: memref<8x64xf32> {etc.cpu.arg = "output:0"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %one = arith.constant dense<1.0> : vector<64xf32>
  %pad = arith.constant 0.0 : f32
  %buf = memref.alloca() {alignment = 64 : i64} : memref<64xf32>
  scf.for %i = %c0 to %c8 step %c1 {
    vector.transfer_write %one, %buf[%c0] {in_bounds = [true]} : vector<64xf32>, memref<64xf32>
    %v = vector.transfer_read %buf[%c0], %pad {in_bounds = [true]} : memref<64xf32>, vector<64xf32>
    vector.transfer_write %v, %y[%i, %c0] {in_bounds = [true]} : vector<64xf32>, memref<8x64xf32>
  }
  return
}
