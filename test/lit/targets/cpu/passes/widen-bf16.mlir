// RUN: etc-opt %s --etc-cpu-widen-bf16 | filecheck %s

// Every bf16 op is computed in f32 and its result rounded to bf16 on its own (torch rounds each op:
// the mulf's result is rounded before the addf reads it), the rounding spelled as integer code
// (round to nearest even: + 0x7FFF + the lowest kept bit; NaN -> 0x7FC0), never as arith.truncf,
// which LLVM would fold back into bf16 arithmetic.
// CHECK-LABEL: func.func @chain
// CHECK-NOT: arith.truncf
// CHECK-NOT: arith.extf
// CHECK: arith.mulf %{{.*}}, %{{.*}} : f32
// CHECK: arith.constant 32767 : i32
// CHECK: arith.shrui
// CHECK: arith.cmpf uno
// CHECK: arith.constant 32704 : i16
// CHECK: arith.bitcast %{{.*}} : i16 to bf16
// CHECK: arith.bitcast %{{.*}} : bf16 to i16
// CHECK: arith.shli
// CHECK: arith.addf %{{.*}}, %{{.*}} : f32
// CHECK: arith.bitcast %{{.*}} : i16 to bf16
// CHECK-NOT: arith.addf %{{.*}} : bf16
func.func @chain(%a: bf16, %b: bf16) -> bf16 {
  %m = arith.mulf %a, %b : bf16
  %s = arith.addf %m, %b : bf16
  return %s : bf16
}

// Vectors (the kernels' epilogues) and math ops too; f32 code is left alone.
// CHECK-LABEL: func.func @vectors
// CHECK: arith.cmpf ogt, %{{.*}}, %{{.*}} : vector<16xf32>
// CHECK: math.exp %{{.*}} : vector<16xf32>
// CHECK: arith.bitcast %{{.*}} : vector<16xi16> to vector<16xbf16>
// CHECK: arith.mulf %{{.*}}, %{{.*}} : vector<8xf32>
func.func @vectors(%v: vector<16xbf16>, %w: vector<8xf32>) -> (vector<16xi1>, vector<16xbf16>, vector<8xf32>) {
  %c = arith.cmpf ogt, %v, %v : vector<16xbf16>
  %e = math.exp %v : vector<16xbf16>
  %f = arith.mulf %w, %w : vector<8xf32>
  return %c, %e, %f : vector<16xi1>, vector<16xbf16>, vector<8xf32>
}

// An f32 -> bf16 conversion of the program's own (a matmul's f32 sum to its bf16 result) rounds the same way.
// CHECK-LABEL: func.func @convert
// CHECK-NOT: arith.truncf
// CHECK: arith.constant 32767 : i32
func.func @convert(%x: f32) -> bf16 {
  %t = arith.truncf %x : f32 to bf16
  return %t : bf16
}
