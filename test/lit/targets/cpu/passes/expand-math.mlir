// RUN: etc-opt %s --etc-cpu-expand-math | filecheck %s

// f32 exp (and erf, below), scalar or vector, becomes Cody-Waite range reduction, a degree-6
// polynomial and exponent-bit scaling: no libm call, so the loops LLVM vectorizes around it stay
// vectorizable and a vector exp is not split into one expf per lane. f64 exps are left alone.
// CHECK-LABEL: func.func @exps
// CHECK-NOT: math.exp %{{.*}} : f32
// CHECK: math.roundeven %{{.*}} : f32
// CHECK-COUNT-8: math.fma
// CHECK: arith.bitcast %{{.*}} : i32 to f32
// CHECK: arith.cmpf uno
// CHECK-NOT: math.exp %{{.*}} : vector<16xf32>
// CHECK: math.roundeven %{{.*}} : vector<16xf32>
// CHECK: arith.bitcast %{{.*}} : vector<16xi32> to vector<16xf32>
// CHECK: math.exp %{{.*}} : f64
func.func @exps(%x: f32, %v: vector<16xf32>, %d: f64) -> (f32, vector<16xf32>, f64) {
  %a = math.exp %x : f32
  %b = math.exp %v : vector<16xf32>
  %c = math.exp %d : f64
  return %a, %b, %c : f32, vector<16xf32>, f64
}

// CHECK-LABEL: func.func @erfs
// CHECK-NOT: math.erf %{{.*}} : f32
// CHECK: arith.divf
// CHECK: math.copysign
// CHECK: arith.select
// CHECK: math.erf %{{.*}} : f64
func.func @erfs(%x: f32, %d: f64) -> (f32, f64) {
  %a = math.erf %x : f32
  %b = math.erf %d : f64
  return %a, %b : f32, f64
}

// tanh: the odd Taylor series near 0, else 1 - 2 / (exp(2|x|) + 1) with the expanded exp and the
// sign of x; f64 left alone.
// CHECK-LABEL: func.func @tanhs
// CHECK-NOT: math.tanh %{{.*}} : vector<16xf32>
// CHECK-COUNT-6: math.fma {{.*}} : vector<16xf32>
// CHECK: math.roundeven %{{.*}} : vector<16xf32>
// CHECK: arith.divf
// CHECK: math.copysign
// CHECK: arith.select
// CHECK: math.tanh %{{.*}} : f64
func.func @tanhs(%v: vector<16xf32>, %d: f64) -> (vector<16xf32>, f64) {
  %a = math.tanh %v : vector<16xf32>
  %b = math.tanh %d : f64
  return %a, %b : vector<16xf32>, f64
}
