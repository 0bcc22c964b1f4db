// RUN: etc-opt %s --etc-cpu-expand-math | filecheck %s
// RUN: etc-opt %s --etc-cpu-expand-math=reciprocal-estimates=false | filecheck %s --check-prefix=DIV

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
// A vector exp its kernel marked etc.nonpositive (softmax's x - max): no overflow test, no
// rounding op (2^k from one fma with a magic constant), no subnormal (flushed by one select).
// CHECK-NOT: math.exp %{{.*}} : vector<16xf32>
// CHECK: arith.maximumf %{{.*}} : vector<16xf32>
// CHECK-NOT: math.roundeven
// CHECK-COUNT-8: math.fma
// CHECK: arith.shli
// CHECK: arith.cmpf olt
// CHECK: arith.select
// CHECK-NOT: arith.cmpf ogt
// CHECK: return
func.func @exps(%x: f32, %v: vector<16xf32>, %d: f64) -> (f32, vector<16xf32>, f64, vector<16xf32>) {
  %a = math.exp %x : f32
  %b = math.exp %v : vector<16xf32>
  %c = math.exp %d : f64
  %n = math.exp %v {etc.nonpositive} : vector<16xf32>
  return %a, %b, %c, %n : f32, vector<16xf32>, f64, vector<16xf32>
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

// tanh: the odd Taylor series near 0, else (1 - e) / (1 + e), e = exp(-2|x|) by the short exp (no
// rounding op), the quotient a refined reciprocal estimate in vector form; the sign of x; f64 left alone.
// CHECK-LABEL: func.func @tanhs
// CHECK-NOT: math.tanh %{{.*}} : vector<16xf32>
// CHECK-COUNT-6: math.fma {{.*}} : vector<16xf32>
// CHECK-NOT: math.roundeven
// CHECK: arith.shli
// CHECK: arith.divf {{.*}} fastmath<ninf,arcp,contract>
// CHECK: math.copysign
// CHECK: arith.select
// CHECK: math.tanh %{{.*}} : f64
// Without reciprocal estimates (the AVX2 row): the quotient is one division.
// DIV-LABEL: func.func @tanhs
// DIV-NOT: arcp
// DIV: arith.divf %{{[^ ]*}}, %{{[^ ]*}} : vector<16xf32>
// DIV-NOT: arcp
// DIV: math.copysign
func.func @tanhs(%v: vector<16xf32>, %d: f64) -> (vector<16xf32>, f64) {
  %a = math.tanh %v : vector<16xf32>
  %b = math.tanh %d : f64
  return %a, %b : vector<16xf32>, f64
}

// sigmoid, as torch-mlir writes it (1 / (1 + exp(-x))), becomes one expression on exp(-|x|): no
// overflow test, 2^k from the rounding fma's bits, the numerator picked by the sign of x. Scalar
// (a loop LLVM vectorizes): a plain division. Vector (a kernel's epilogue, its 1 a splat or a
// broadcast): a reciprocal LLVM may estimate (arcp), then one correction of the quotient.
// CHECK-LABEL: func.func @sigmoids
// CHECK-NOT: math.exp
// CHECK: arith.maximumf
// CHECK: %[[T:.*]] = math.fma %{{.*}}, %{{.*}}, %{{.*}} : f32
// CHECK-COUNT-7: math.fma {{.*}} : f32
// CHECK: %[[BITS:.*]] = arith.bitcast %[[T]] : f32 to i32
// CHECK: arith.shli %[[BITS]]
// CHECK: arith.cmpf ogt
// CHECK: arith.select
// CHECK: arith.divf %{{[^ ]*}}, %{{[^ ]*}} : f32
// CHECK: arith.maximumf {{.*}} : vector<16xf32>
// CHECK: arith.divf {{.*}} fastmath<ninf,arcp,contract> : vector<16xf32>
// CHECK: arith.negf {{.*}} : vector<16xf32>
// CHECK-COUNT-2: math.fma {{.*}} : vector<16xf32>
// CHECK: arith.maximumf {{.*}} : vector<8xf32>
// CHECK: arith.divf {{.*}} fastmath<ninf,arcp,contract> : vector<8xf32>
// An exp whose value is also used elsewhere is no sigmoid's: expanded on its own.
// CHECK: math.roundeven
// CHECK: arith.divf
// CHECK-NOT: math.exp
// CHECK: return
// DIV-LABEL: func.func @sigmoids
// DIV-NOT: arcp
// DIV: arith.divf %{{[^ ]*}}, %{{[^ ]*}} : vector<16xf32>
// DIV-NOT: arcp
// DIV: arith.divf %{{[^ ]*}}, %{{[^ ]*}} : vector<8xf32>
// DIV-NOT: arcp
// DIV: return
func.func @sigmoids(%x: f32, %v: vector<16xf32>, %w: vector<8xf32>, %y: f32) -> (f32, vector<16xf32>, vector<8xf32>, f32, f32) {
  %one = arith.constant 1.0 : f32
  %n = arith.negf %x : f32
  %e = math.exp %n : f32
  %d = arith.addf %e, %one : f32
  %s = arith.divf %one, %d : f32
  %ones = arith.constant dense<1.0> : vector<16xf32>
  %nv = arith.negf %v : vector<16xf32>
  %ev = math.exp %nv : vector<16xf32>
  %dv = arith.addf %ones, %ev : vector<16xf32>
  %sv = arith.divf %ones, %dv : vector<16xf32>
  %one8 = vector.broadcast %one : f32 to vector<8xf32>
  %nw = arith.negf %w : vector<8xf32>
  %ew = math.exp %nw : vector<8xf32>
  %dw = arith.addf %ew, %one8 : vector<8xf32>
  %sw = arith.divf %one8, %dw : vector<8xf32>
  %ny = arith.negf %y : f32
  %ey = math.exp %ny : f32
  %dy = arith.addf %ey, %one : f32
  %sy = arith.divf %one, %dy : f32
  return %s, %sv, %sw, %sy, %ey : f32, vector<16xf32>, vector<8xf32>, f32, f32
}

// A sigmoid whose division a window kernel marked latency-bound (its epilogue's chain bounds the
// kernel's time): a plain division, not the reciprocal estimate and its correction.
// CHECK-LABEL: func.func @latency_bound_sigmoid
// CHECK-NOT: math.exp
// CHECK: arith.divf %{{[^ ]*}}, %{{[^ ]*}} : vector<16xf32>
// CHECK-NOT: fastmath<ninf,arcp,contract>
// CHECK: return
func.func @latency_bound_sigmoid(%v: vector<16xf32>) -> vector<16xf32> {
  %ones = arith.constant dense<1.0> : vector<16xf32>
  %nv = arith.negf %v : vector<16xf32>
  %ev = math.exp %nv : vector<16xf32>
  %dv = arith.addf %ones, %ev : vector<16xf32>
  %sv = arith.divf %ones, %dv {etc.latency_bound} : vector<16xf32>
  return %sv : vector<16xf32>
}
