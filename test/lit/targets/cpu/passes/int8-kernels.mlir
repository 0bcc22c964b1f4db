// RUN: etc-opt %s --split-input-file --etc-cpu-int8-kernels="dot=avx512-vnni mr=6 panels=4" | filecheck %s
// RUN: etc-opt %s --split-input-file --etc-cpu-int8-kernels="dot=avx-vnni mr=2 panels=1" | filecheck %s --check-prefix=AVX
// RUN: etc-opt %s --split-input-file --etc-cpu-int8-kernels | filecheck %s --check-prefix=NONE

// A linear layer's qgemm (2 rows, K = 6 in 2 groups of 4, 20 columns: one whole panel and a
// partial one) and its per-column requantization, as lower_quantized.py emits them. The pair
// becomes one kernel: 2 x 2 panels of accumulators (the tile shrinks to the matrix), the K loop
// of broadcast 4-byte groups x 64-byte panel rows (one contiguous load each) through vpdpbusd, then the epilogue on the
// registers: the correction, one fma, roundeven, the zero point, the clamp, an i8 store per
// vector (the second panel's 4 valid columns masked: not in bounds). Nothing of the pair is left.
// CHECK: module attributes {etc.cpu.decisions = [{kind = "contraction", op = "linalg.generic", path = "gemm"
// CHECK-LABEL: func.func @linear
// CHECK-NOT: etc.cpu.qgemm
// CHECK-NOT: etc.cpu.requant
// CHECK: %[[BFLAT:.*]] = tensor.collapse_shape %arg1 {{\[}}[0], [1], [2, 3]] : tensor<2x2x16x4xi8> into tensor<2x2x64xi8>
// CHECK: scf.for %[[KB:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args({{.*}}) -> (vector<16xi32>, vector<16xi32>, vector<16xi32>, vector<16xi32>)
// CHECK-COUNT-2: vector.transfer_read %[[BFLAT]][%{{.*}}, %[[KB]], %{{.*}}], %{{.*}} {in_bounds = [true]} : tensor<2x2x64xi8>, vector<64xi8>
// CHECK: vector.transfer_read %arg0[%{{.*}}, %[[KB]], %{{.*}}], %{{.*}} {in_bounds = [true]} : tensor<2x2x4xi8>, vector<4xi8>
// CHECK: vector.broadcast %{{.*}} : i32 to vector<16xi32>
// CHECK-COUNT-2: llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.512"
// CHECK: scf.yield
// CHECK: arith.subi %{{.*}}, %{{.*}} : vector<16xi32>
// CHECK: math.fma %{{.*}}, %{{.*}}, %{{.*}} : vector<16xf32>
// CHECK: math.roundeven
// CHECK: arith.fptosi %{{.*}} : vector<16xf32> to vector<16xi8>
// CHECK: vector.transfer_write %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] {in_bounds = [true]} : vector<16xi8>, tensor<2x20xi8>
// CHECK: vector.transfer_read %{{.*}}[%{{.*}}], %{{[a-z0-9_]+}} : tensor<20xi32>, vector<16xi32>
// CHECK: vector.transfer_write %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] : vector<16xi8>, tensor<2x20xi8>
// On AVX-VNNI: 8-lane dot products, two per panel.
// AVX: llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.256"({{.*}}) : (vector<8xi32>, vector<32xi8>, vector<32xi8>) -> vector<8xi32>
// Without a dot-product instruction the pair stays plain loops, and the decision says why.
// NONE: module attributes {etc.cpu.decisions = [{kind = "contraction", op = "linalg.generic", path = "loops", reason = "the target has no int8 dot-product instruction (AVX-512 VNNI or AVX-VNNI): plain i32 loops"
// NONE: etc.cpu.decided
// NONE: etc.cpu.requant
func.func @linear(%a: tensor<2x2x4xi8>, %b: tensor<2x2x16x4xi8>) -> tensor<2x20xi8> {
  %c0_i32 = arith.constant 0 : i32
  %corr = arith.constant dense<[-28497, 11753, -21252, 15295, -21252, -49588, 17871, -17066, 34615, -45241, 34132, 15295, 53452, -16744, -28014, 6762, 20930, -68264, 13041, 644]> : tensor<20xi32>
  %mult = arith.constant dense<0.0025> : tensor<20xf32>
  %bias = arith.constant dense<1.5> : tensor<20xf32>
  %zp = arith.constant 1.0 : f32
  %lo = arith.constant -128.0 : f32
  %hi = arith.constant 127.0 : f32
  %5 = tensor.empty() : tensor<2x2x16xi32>
  %6 = linalg.fill ins(%c0_i32 : i32) outs(%5 : tensor<2x2x16xi32>) -> tensor<2x2x16xi32>
  %7 = linalg.generic {indexing_maps = [affine_map<(m, nb, nl, kb, kl) -> (m, kb, kl)>, affine_map<(m, nb, nl, kb, kl) -> (nb, kb, nl, kl)>, affine_map<(m, nb, nl, kb, kl) -> (m, nb, nl)>], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]} ins(%a, %b : tensor<2x2x4xi8>, tensor<2x2x16x4xi8>) outs(%6 : tensor<2x2x16xi32>) attrs = {etc.cpu.qgemm = {a_unsigned = true, kind = "contraction"}} {
  ^bb0(%in: i8, %in_8: i8, %out: i32):
    %12 = arith.extui %in : i8 to i32
    %13 = arith.extsi %in_8 : i8 to i32
    %14 = arith.muli %12, %13 : i32
    %15 = arith.addi %out, %14 : i32
    linalg.yield %15 : i32
  } -> tensor<2x2x16xi32>
  %collapsed = tensor.collapse_shape %7 [[0], [1, 2]] : tensor<2x2x16xi32> into tensor<2x32xi32>
  %slice = tensor.extract_slice %collapsed[0, 0] [2, 20] [1, 1] : tensor<2x32xi32> to tensor<2x20xi32>
  %8 = tensor.empty() : tensor<2x20xi8>
  %9 = linalg.generic {indexing_maps = [affine_map<(m, n) -> (m, n)>, affine_map<(m, n) -> (n)>, affine_map<(m, n) -> (n)>, affine_map<(m, n) -> (n)>, affine_map<(m, n) -> (m, n)>], iterator_types = ["parallel", "parallel"]} ins(%slice, %corr, %mult, %bias : tensor<2x20xi32>, tensor<20xi32>, tensor<20xf32>, tensor<20xf32>) outs(%8 : tensor<2x20xi8>) attrs = {etc.cpu.requant = {max = 127 : i64, min = -128 : i64, per = "col", zero_point = 1 : i64}} {
  ^bb0(%in: i32, %c: i32, %m: f32, %bb: f32, %out: i8):
    %12 = arith.subi %in, %c : i32
    %13 = arith.sitofp %12 : i32 to f32
    %14 = math.fma %13, %m, %bb : f32
    %15 = math.roundeven %14 : f32
    %16 = arith.addf %15, %zp : f32
    %17 = arith.maximumf %16, %lo : f32
    %18 = arith.minimumf %17, %hi : f32
    %19 = arith.fptosi %18 : f32 to i8
    linalg.yield %19 : i8
  } -> tensor<2x20xi8>
  return %9 : tensor<2x20xi8>
}

// -----

// A depthwise int8 convolution has no int8 window kernel: plain loops, with the reason.
// CHECK: module attributes {etc.cpu.decisions = [{kind = "window", op = "linalg.generic", path = "loops", reason = "int8 depthwise/grouped convolution: no int8 window kernel yet, plain i32 loops"
// CHECK: etc.cpu.decided
func.func @depthwise(%x: tensor<1x4x1x6x6xi8>, %w: tensor<4x1x1x3x3xi8>) -> tensor<1x4x1x4x4xi32> {
  %c0 = arith.constant 0 : i32
  %e = tensor.empty() : tensor<1x4x1x4x4xi32>
  %f = linalg.fill ins(%c0 : i32) outs(%e : tensor<1x4x1x4x4xi32>) -> tensor<1x4x1x4x4xi32>
  %r = linalg.generic {indexing_maps = [affine_map<(b, g, j, oh, ow, c, kh, kw) -> (b, g, c, oh + kh, ow + kw)>, affine_map<(b, g, j, oh, ow, c, kh, kw) -> (g, j, c, kh, kw)>, affine_map<(b, g, j, oh, ow, c, kh, kw) -> (b, g, j, oh, ow)>], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]} ins(%x, %w : tensor<1x4x1x6x6xi8>, tensor<4x1x1x3x3xi8>) outs(%f : tensor<1x4x1x4x4xi32>) attrs = {etc.cpu.qwindow = {groups = 4 : i64}} {
  ^bb0(%a: i8, %b: i8, %acc: i32):
    %a32 = arith.extsi %a : i8 to i32
    %b32 = arith.extsi %b : i8 to i32
    %m = arith.muli %a32, %b32 : i32
    %s = arith.addi %acc, %m : i32
    linalg.yield %s : i32
  } -> tensor<1x4x1x4x4xi32>
  return %r : tensor<1x4x1x4x4xi32>
}
