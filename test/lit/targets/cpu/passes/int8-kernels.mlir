// RUN: etc-opt %s --split-input-file --etc-cpu-int8-kernels="dot=avx512-vnni mr=6 panels=4" | filecheck %s
// RUN: etc-opt %s --split-input-file --etc-cpu-int8-kernels="dot=avx-vnni mr=2 panels=1" | filecheck %s --check-prefix=AVX
// RUN: etc-opt %s --split-input-file --etc-cpu-int8-kernels="dot=avx2-madd mr=2 panels=1" | filecheck %s --check-prefix=MADD
// RUN: etc-opt %s --split-input-file --etc-cpu-int8-kernels | filecheck %s --check-prefix=NONE

// A linear layer's qgemm (2 rows, K = 6 in 2 groups of 4, 20 columns: one whole panel and a
// partial one) and its per-column requantization, as etc-cpu-lower-quantized emits them. The pair
// becomes one kernel: 2 x 2 panels of accumulators (the tile shrinks to the matrix) starting at
// -corr (the correction, per column here), the K loop (marked for etc-cpu-prefetch-gemm-tiles)
// of broadcast 4-byte groups x 64-byte panel rows (one contiguous load each) through vpdpbusd, then the epilogue on the
// registers: one fma, the clamp to the output's range less its zero point, one rounding convert
// ({rn-sae}), two dword->word packs, the zero point added to the words (saturating), one word->byte pack, a
// dword shuffle undoing the packs' per-128-bit-lane order, one store for a row's two vectors (32
// bytes, 20 columns valid: masked, not in bounds). The loop over the row tiles (the panels
// past the whole groups; a group loop, when there is one, too) is marked etc.thread_split: its
// iterations write their own rows. Nothing of the pair is left.
// CHECK: module attributes {etc.cpu.decisions = [{kind = "contraction", op = "linalg.generic", path = "gemm"
// CHECK-LABEL: func.func @linear
// CHECK-NOT: etc.cpu.qgemm
// CHECK-NOT: etc.cpu.requant
// CHECK: %[[BFLAT:.*]] = tensor.collapse_shape %arg1 {{\[}}[0], [1], [2, 3]] : tensor<2x2x16x4xi8> into tensor<2x2x64xi8>
// CHECK: scf.for %[[KB:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args({{.*}}) -> (vector<16xi32>, vector<16xi32>, vector<16xi32>, vector<16xi32>)
// CHECK-COUNT-2: vector.transfer_read %[[BFLAT]][%{{.*}}, %[[KB]], %{{.*}}], %{{.*}} {in_bounds = [true]} : tensor<2x2x64xi8>, vector<64xi8>
// CHECK: %[[KB4:.*]] = arith.muli %[[KB]], %{{.*}} : index
// CHECK: vector.transfer_read %{{.*}}[%{{.*}}, %[[KB4]]], %{{.*}} {in_bounds = [true]} : tensor<2x8xi8>, vector<4xi8>
// CHECK: vector.broadcast %{{.*}} : i32 to vector<16xi32>
// CHECK-COUNT-2: llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.512"
// CHECK: scf.yield
// CHECK-NEXT: } {etc.cpu.int8_k_loop}
// CHECK: math.fma %{{.*}}, %{{.*}}, %{{.*}} : vector<16xf32>
// CHECK: arith.maximumf %{{.*}}, %{{.*}} fastmath<nsz> : vector<16xf32>
// CHECK: arith.minimumf %{{.*}}, %{{.*}} fastmath<nsz> : vector<16xf32>
// CHECK: llvm.call_intrinsic "llvm.x86.avx512.mask.cvtps2dq.512"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : (vector<16xf32>, vector<16xi32>, i16, i32) -> vector<16xi32>
// CHECK-COUNT-2: llvm.call_intrinsic "llvm.x86.avx512.packssdw.512"
// CHECK-COUNT-2: llvm.call_intrinsic "llvm.sadd.sat.v32i16"({{.*}}) : (vector<32xi16>, vector<32xi16>) -> vector<32xi16>
// CHECK: llvm.call_intrinsic "llvm.x86.avx512.packsswb.512"
// CHECK: vector.shuffle %{{.*}}, %{{.*}} [0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15] : vector<16xi32>, vector<16xi32>
// CHECK: vector.extract_strided_slice %{{.*}} {offsets = [0], sizes = [32], strides = [1]} : vector<64xi8> to vector<32xi8>
// CHECK: vector.transfer_write %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] : vector<32xi8>, tensor<2x20xi8>
// CHECK: } {etc.thread_split}
// CHECK-NOT: math.roundeven
// On AVX-VNNI: 8-lane dot products, two per panel; 256-bit packs, and round-then-convert (no
// embedded rounding on ymm without AVX-512).
// AVX: llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.256"({{.*}}) : (vector<8xi32>, vector<32xi8>, vector<32xi8>) -> vector<8xi32>
// AVX: math.roundeven %{{.*}} : vector<8xf32>
// AVX: arith.fptosi %{{.*}} : vector<8xf32> to vector<8xi32>
// AVX: llvm.call_intrinsic "llvm.x86.avx2.packssdw"({{.*}}) : (vector<8xi32>, vector<8xi32>) -> vector<16xi16>
// AVX: llvm.call_intrinsic "llvm.x86.avx2.packsswb"({{.*}}) : (vector<16xi16>, vector<16xi16>) -> vector<32xi8>
// AVX: vector.shuffle %{{.*}}, %{{.*}} [0, 4, 1, 5, 2, 6, 3, 7] : vector<8xi32>, vector<8xi32>
// On AVX2 without VNNI: each vpdpbusd is two vpmaddwd, on the 4-byte groups' even and odd bytes
// widened to i16 lanes (the signed bytes, here the weights' panel rows, shifted arithmetically;
// the unsigned ones, the broadcast row, masked and shifted), the two products and the accumulator added.
// MADD: %[[B:.*]] = vector.transfer_read %{{.*}} : tensor<2x2x64xi8>, vector<32xi8>
// MADD: %[[BW:.*]] = vector.bitcast %[[B]] : vector<32xi8> to vector<16xi16>
// MADD: %[[BH:.*]] = arith.shli %[[BW]], %[[EIGHT:.*]] : vector<16xi16>
// MADD: %[[BE:.*]] = arith.shrsi %[[BH]], %[[EIGHT]] : vector<16xi16>
// MADD: %[[BO:.*]] = arith.shrsi %[[BW]], %[[EIGHT]] : vector<16xi16>
// MADD: vector.broadcast %{{.*}} : i32 to vector<8xi32>
// MADD: %[[A:.*]] = vector.bitcast %{{.*}} : vector<8xi32> to vector<32xi8>
// MADD-NEXT: %[[AW:.*]] = vector.bitcast %[[A]] : vector<32xi8> to vector<16xi16>
// MADD-NEXT: %[[AE:.*]] = arith.andi %[[AW]], %{{.*}} : vector<16xi16>
// MADD-NEXT: %[[AO:.*]] = arith.shrui %[[AW]], %[[EIGHT]] : vector<16xi16>
// MADD: %[[E:.*]] = llvm.call_intrinsic "llvm.x86.avx2.pmadd.wd"(%[[AE]], %[[BE]]) : (vector<16xi16>, vector<16xi16>) -> vector<8xi32>
// MADD: %[[O:.*]] = llvm.call_intrinsic "llvm.x86.avx2.pmadd.wd"(%[[AO]], %[[BO]]) : (vector<16xi16>, vector<16xi16>) -> vector<8xi32>
// MADD: %[[S:.*]] = arith.addi %[[E]], %[[O]] : vector<8xi32>
// MADD: arith.addi %{{.*}}, %[[S]] : vector<8xi32>
// MADD-NOT: vpdpbusd
// MADD: llvm.call_intrinsic "llvm.x86.avx2.packssdw"
// Without a dot product the pair stays plain loops, and the decision says why.
// NONE: module attributes {etc.cpu.decisions = [{kind = "contraction", op = "linalg.generic", path = "loops", reason = "the target has no int8 dot product (AVX-512 VNNI, AVX-VNNI or AVX2's vpmaddwd): plain i32 loops"
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

// The lowering bounds the scaled accumulators inside i32 (`fits_i32`): the epilogue rounds them
// unclamped, the packs saturate to i8 and the bytes are clamped to the output's range (here a
// ReLU's: min = the zero point, so a byte max and no min). No float clamp is left.
// CHECK-LABEL: func.func @linear_saturating
// CHECK: } {etc.cpu.int8_k_loop}
// CHECK-NOT: arith.maximumf
// CHECK-NOT: arith.minimumf
// CHECK: math.fma %{{.*}}, %{{.*}}, %{{.*}} : vector<16xf32>
// CHECK-NEXT: llvm.call_intrinsic "llvm.x86.avx512.mask.cvtps2dq.512"
// CHECK: llvm.call_intrinsic "llvm.x86.avx512.packsswb.512"
// CHECK-NEXT: arith.maxsi %{{.*}}, %{{.*}} : vector<64xi8>
// CHECK-NOT: arith.minsi
// CHECK: vector.transfer_write
func.func @linear_saturating(%a: tensor<2x2x4xi8>, %b: tensor<2x2x16x4xi8>) -> tensor<2x20xi8> {
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
  %9 = linalg.generic {indexing_maps = [affine_map<(m, n) -> (m, n)>, affine_map<(m, n) -> (n)>, affine_map<(m, n) -> (n)>, affine_map<(m, n) -> (n)>, affine_map<(m, n) -> (m, n)>], iterator_types = ["parallel", "parallel"]} ins(%slice, %corr, %mult, %bias : tensor<2x20xi32>, tensor<20xi32>, tensor<20xf32>, tensor<20xf32>) outs(%8 : tensor<2x20xi8>) attrs = {etc.cpu.requant = {fits_i32 = true, max = 127 : i64, min = 1 : i64, per = "col", zero_point = 1 : i64}} {
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

// An int8 add (`etc.cpu.qadd`) that alone reads a qgemm's result (through the expand to its shape)
// is fused into the kernel's epilogue: the residual read next to the accumulators (through a flat
// view, at row * N + column: as [M, N] the canonicalizer forwarded a producing kernel's stores to
// these reads, across what two threads split), the
// qgemm's value rounded and shifted to the add's zero point in float, both scaled, summed, scaled
// by the inverse output scale, clamped and rounded; the kernel returns the add's result, stored
// with the add's zero point. The add is gone and the decision says it was fused.
// CHECK: {kind = "epilogue", op = "linalg.generic", path = "fused"
// CHECK-LABEL: func.func @linear_add
// CHECK-NOT: etc.cpu.qadd
// CHECK: arith.constant dense<-128> : vector<32xi16>
// CHECK: %[[RFLAT:.*]] = tensor.collapse_shape %arg2 {{\[}}[0, 1, 2]] : tensor<1x2x20xi8> into tensor<40xi8>
// CHECK: } {etc.cpu.int8_k_loop}
// CHECK: arith.minimumf %{{.*}}, %{{.*}} fastmath<nsz> : vector<16xf32>
// CHECK: vector.transfer_read %[[RFLAT]][%{{.*}}], %{{.*}} {in_bounds = [true]} : tensor<40xi8>, vector<16xi8>
// CHECK: math.roundeven %{{.*}} : vector<16xf32>
// CHECK: arith.addf
// CHECK: arith.mulf
// CHECK: arith.extsi %{{.*}} : vector<16xi8> to vector<16xi32>
// CHECK: arith.subi
// CHECK: arith.sitofp
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: arith.mulf
// CHECK: arith.maximumf
// CHECK: arith.minimumf
// CHECK: llvm.call_intrinsic "llvm.x86.avx512.mask.cvtps2dq.512"
// CHECK: %[[OUT:.*]] = tensor.expand_shape %{{.*}} {{\[}}[0, 1], [2]] output_shape [1, 2, 20] : tensor<2x20xi8> into tensor<1x2x20xi8>
// CHECK: return %[[OUT]]
func.func @linear_add(%a: tensor<2x2x4xi8>, %b: tensor<2x2x16x4xi8>, %r: tensor<1x2x20xi8>) -> tensor<1x2x20xi8> {
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
  %ex = tensor.expand_shape %9 [[0, 1], [2]] output_shape [1, 2, 20] : tensor<2x20xi8> into tensor<1x2x20xi8>
  %ae = tensor.empty() : tensor<1x2x20xi8>
  %sa = arith.constant 0.5 : f32
  %sb = arith.constant 0.25 : f32
  %zb = arith.constant 3 : i32
  %inv = arith.constant 2.0 : f32
  %add = linalg.generic {indexing_maps = [affine_map<(b, m, n) -> (b, m, n)>, affine_map<(b, m, n) -> (b, m, n)>, affine_map<(b, m, n) -> (b, m, n)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%r, %ex : tensor<1x2x20xi8>, tensor<1x2x20xi8>) outs(%ae : tensor<1x2x20xi8>) attrs = {etc.cpu.qadd = {a_zero_point = 3 : i64, b_zero_point = 1 : i64, a_scale = 0.25 : f32, b_scale = 0.5 : f32, inverse = 2.0 : f32, zero_point = -128 : i64, min = -128 : i64, max = 127 : i64}} {
  ^bb0(%x: i8, %y: i8, %o: i8):
    %x32 = arith.extsi %x : i8 to i32
    %xc = arith.subi %x32, %zb : i32
    %xf = arith.sitofp %xc : i32 to f32
    %xs = arith.mulf %xf, %sb : f32
    %yf = arith.sitofp %y : i8 to f32
    %ys = arith.mulf %yf, %sa : f32
    %t = arith.addf %xs, %ys : f32
    %m = arith.mulf %t, %inv : f32
    %rd = math.roundeven %m : f32
    %z = arith.addf %rd, %lo : f32
    %c1 = arith.maximumf %z, %lo : f32
    %c2 = arith.minimumf %c1, %hi : f32
    %q = arith.fptosi %c2 : f32 to i8
    linalg.yield %q : i8
  } -> tensor<1x2x20xi8>
  return %add : tensor<1x2x20xi8>
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

// -----

// An 8da4w linear as etc-cpu-lower-quantized emits it: the activation's range per row, its scale
// and zero point, its quantize generic (`etc.cpu.qquant`: q [M, K/8, 2, 4] with each 8 k as their
// even then odd values), the int8 x int4 contraction (`etc.cpu.qgemm_dynamic`: the weight's bytes as
// panels [NB, K/8, 16, 4] of nibble pairs, the group scales [NB, G, 16]; M dynamic, K = 16 in 2
// groups of 8, 20 columns) and its epilogue (`etc.cpu.qdequant`). The chain becomes one kernel
// reading the float activation: per row a vector min/max, the scale and zero point, q a vector at a
// time (each 8 shuffled even k then odd k) summed per group into the accumulator's start, -8 * the
// group's sum of q (the weights' +8 offset); then each 64-byte panel
// row is loaded once, xor 0x88 makes each nibble w + 8, low and high nibbles are masked and
// shifted out in registers, two vpdpbusd (even k, odd k) per panel vector, then one fma with
// the group scale into an f32 accumulator; rows in tiles of 2 then one by one; the epilogue
// stores f32 (the partial panel's 4 columns masked).
// CHECK: module attributes {etc.cpu.decisions = [{kind = "contraction", op = "linalg.generic", path = "gemm"
// CHECK-LABEL: func.func @linear4
// CHECK-NOT: etc.cpu.qgemm_dynamic
// CHECK-NOT: etc.cpu.qdequant
// CHECK-NOT: linalg.generic
// CHECK: scf.for {{.*}} -> (tensor<?x16xi8>, tensor<?xf32>, tensor<?xf32>, tensor<?x2xi32>)
// CHECK: vector.reduction <minimumf>
// CHECK: vector.reduction <maximumf>
// CHECK: tensor.insert
// CHECK: tensor.insert
// CHECK: math.roundeven %{{.*}} : vector<8xf32>
// CHECK: vector.shuffle %{{.*}}, %{{.*}} [0, 2, 4, 6, 1, 3, 5, 7] : vector<8xi8>, vector<8xi8>
// CHECK: vector.reduction <add>, %{{.*}} : vector<8xi32> into i32
// CHECK: arith.muli %{{.*}}, %{{.*}} : i32
// CHECK: tensor.insert %{{.*}} into %{{.*}}[%{{.*}}, %{{.*}}] : tensor<?x2xi32>
// CHECK: } {etc.thread_split}
// CHECK: %[[QS:.*]] = tensor.cast %{{.*}} : tensor<?x2xi32> to tensor<?x2xi32>
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (tensor<?x20xf32>)
// CHECK: scf.for %[[G:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args({{.*}}) -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>)
// CHECK: tensor.extract %[[QS]][%{{.*}}, %[[G]]] : tensor<?x2xi32>
// CHECK: vector.transfer_read %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}], %{{.*}} {in_bounds = [true]} : tensor<2x2x64xi8>, vector<64xi8>
// CHECK-NEXT: arith.xori %{{.*}}, %{{.*}} : vector<64xi8>
// CHECK-NEXT: arith.andi %{{.*}}, %{{.*}} : vector<64xi8>
// CHECK-NEXT: arith.shrui %{{.*}}, %{{.*}} : vector<64xi8>
// CHECK-NEXT: arith.andi %{{.*}}, %{{.*}} : vector<64xi8>
// CHECK: vector.transfer_read %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}], %{{.*}} {in_bounds = [true]} : tensor<?x2x2x4xi8>, vector<4xi8>
// CHECK: llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.512"
// CHECK-NEXT: llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.512"
// CHECK: arith.sitofp %{{.*}} : vector<16xi32> to vector<16xf32>
// CHECK: vector.transfer_read %arg2[%{{.*}}, %[[G]], %{{.*}}], %{{.*}} {in_bounds = [true]} : tensor<2x2x16xf32>, vector<16xf32>
// CHECK: math.fma
// CHECK: scf.yield
// CHECK: arith.mulf %{{.*}}, %{{.*}} : vector<16xf32>
// CHECK: arith.subf
// CHECK: math.fma
// CHECK: vector.transfer_write %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] {in_bounds = [true]} : vector<16xf32>, tensor<?x20xf32>
// CHECK: vector.transfer_write %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] : vector<16xf32>, tensor<?x20xf32>
// With vpmaddwd pairs (AVX2) q is stored widened, each group of 4 as its even pair then its odd
// pair (after the even-k/odd-k order: [0, 4, 2, 6, 1, 5, 3, 7] of each 8), so the tiles broadcast
// the two 32-bit pairs from memory instead of widening a broadcast byte group per row.
// MADD-LABEL: func.func @linear4
// MADD: arith.extsi %{{.*}} : vector<8xi8> to vector<8xi16>
// MADD-NEXT: vector.shuffle %{{.*}}, %{{.*}} [0, 4, 2, 6, 1, 5, 3, 7] : vector<8xi16>, vector<8xi16>
// MADD-NEXT: vector.transfer_write %{{.*}} : vector<8xi16>, tensor<?x16xi16>
// MADD: %[[EVEN:.*]] = vector.transfer_read %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}, %c0], %{{.*}} : tensor<?x2x2x4xi16>, vector<2xi16>
// MADD: vector.broadcast %{{.*}} : i32 to vector<8xi32>
// MADD: %[[ODD:.*]] = vector.transfer_read %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}, %c2], %{{.*}} : tensor<?x2x2x4xi16>, vector<2xi16>
// MADD-NOT: arith.shrsi
// MADD: llvm.call_intrinsic "llvm.x86.avx2.pmadd.wd"
// AVX-LABEL: func.func @linear4
// AVX: llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.256"({{.*}}) : (vector<8xi32>, vector<32xi8>, vector<32xi8>) -> vector<8xi32>
// NONE: module attributes {etc.cpu.decisions = [{kind = "contraction", op = "linalg.generic", path = "loops", reason = "the target has no int8 dot product (AVX-512 VNNI, AVX-VNNI or AVX2's vpmaddwd): a dynamic linear as plain loops on the weight's bytes"
// NONE-LABEL: func.func @linear4
// NONE: etc.cpu.decided
// NONE: etc.cpu.qdequant
func.func @linear4(%x: tensor<?x16xf32>, %w: tensor<2x2x16x4xi8>, %s: tensor<2x2x16xf32>) -> tensor<?x20xf32> {
  %c0 = arith.constant 0 : index
  %M = tensor.dim %x, %c0 : tensor<?x16xf32>
  %zero = arith.constant 0.0 : f32
  %re = tensor.empty(%M) : tensor<?xf32>
  %r0 = linalg.fill ins(%zero : f32) outs(%re : tensor<?xf32>) -> tensor<?xf32>
  %range:2 = linalg.generic {indexing_maps = [affine_map<(m, k) -> (m, k)>, affine_map<(m, k) -> (m)>, affine_map<(m, k) -> (m)>], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<?x16xf32>) outs(%r0, %r0 : tensor<?xf32>, tensor<?xf32>) {
  ^bb0(%v: f32, %l: f32, %h: f32):
    %l2 = arith.minimumf %l, %v : f32
    %h2 = arith.maximumf %h, %v : f32
    linalg.yield %l2, %h2 : f32, f32
  } -> (tensor<?xf32>, tensor<?xf32>)
  %params:3 = linalg.generic {indexing_maps = [affine_map<(m) -> (m)>, affine_map<(m) -> (m)>, affine_map<(m) -> (m)>, affine_map<(m) -> (m)>, affine_map<(m) -> (m)>], iterator_types = ["parallel"]} ins(%range#0, %range#1 : tensor<?xf32>, tensor<?xf32>) outs(%re, %re, %re : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>) {
  ^bb0(%l: f32, %h: f32, %o1: f32, %o2: f32, %o3: f32):
    %c255 = arith.constant 255.0 : f32
    %floor = arith.constant 1.17549435E-38 : f32
    %one = arith.constant 1.0 : f32
    %qmin = arith.constant -128.0 : f32
    %qmax = arith.constant 127.0 : f32
    %d = arith.subf %h, %l : f32
    %s0 = arith.divf %d, %c255 : f32
    %sv = arith.maximumf %s0, %floor : f32
    %inv = arith.divf %one, %sv : f32
    %ls = arith.divf %l, %sv : f32
    %lr = math.roundeven %ls : f32
    %z0 = arith.subf %qmin, %lr : f32
    %z1 = arith.maximumf %z0, %qmin : f32
    %zz = arith.minimumf %z1, %qmax : f32
    linalg.yield %sv, %inv, %zz : f32, f32, f32
  } -> (tensor<?xf32>, tensor<?xf32>, tensor<?xf32>)
  %qe = tensor.empty(%M) : tensor<?x2x2x4xi8>
  %q = linalg.generic {indexing_maps = [affine_map<(m, kb, p, j) -> (m, kb * 8 + j * 2 + p)>, affine_map<(m, kb, p, j) -> (m)>, affine_map<(m, kb, p, j) -> (m)>, affine_map<(m, kb, p, j) -> (m, kb, p, j)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%x, %params#1, %params#2 : tensor<?x16xf32>, tensor<?xf32>, tensor<?xf32>) outs(%qe : tensor<?x2x2x4xi8>) attrs = {etc.cpu.qquant = {granularity = "per_row", floor = 1.17549435E-38 : f32}} {
  ^bb0(%xv: f32, %iv: f32, %zv: f32, %o: i8):
    %qmin = arith.constant -128.0 : f32
    %qmax = arith.constant 127.0 : f32
    %y = arith.mulf %xv, %iv : f32
    %r = math.roundeven %y : f32
    %a = arith.addf %r, %zv : f32
    %c1 = arith.maximumf %a, %qmin : f32
    %c2 = arith.minimumf %c1, %qmax : f32
    %i = arith.fptosi %c2 : f32 to i8
    linalg.yield %i : i8
  } -> tensor<?x2x2x4xi8>
  %ae = tensor.empty(%M) : tensor<?x2x16xf32>
  %a0 = linalg.fill ins(%zero : f32) outs(%ae : tensor<?x2x16xf32>) -> tensor<?x2x16xf32>
  %acc = linalg.generic {indexing_maps = [affine_map<(m, nb, c, kb, p, j) -> (m, kb, p, j)>, affine_map<(m, nb, c, kb, p, j) -> (nb, kb, c, j)>, affine_map<(m, nb, c, kb, p, j) -> (nb, kb floordiv 1, c)>, affine_map<(m, nb, c, kb, p, j) -> (m, nb, c)>], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]} ins(%q, %w, %s : tensor<?x2x2x4xi8>, tensor<2x2x16x4xi8>, tensor<2x2x16xf32>) outs(%a0 : tensor<?x2x16xf32>) attrs = {etc.cpu.qgemm_dynamic = {bits = 4 : i64, group_size = 8 : i64}} {
  ^bb0(%qa: i8, %qb: i8, %qs: f32, %qc: f32):
    %p = linalg.index 4 : index
    %p8 = arith.index_cast %p : index to i8
    %c4 = arith.constant 4 : i8
    %c8 = arith.constant 8 : i8
    %c15 = arith.constant 15 : i8
    %sh = arith.muli %p8, %c4 : i8
    %n0 = arith.shrui %qb, %sh : i8
    %n1 = arith.andi %n0, %c15 : i8
    %n2 = arith.xori %n1, %c8 : i8
    %wv = arith.subi %n2, %c8 : i8
    %a32 = arith.extsi %qa : i8 to i32
    %w32 = arith.extsi %wv : i8 to i32
    %pr = arith.muli %a32, %w32 : i32
    %pf = arith.sitofp %pr : i32 to f32
    %sum = math.fma %pf, %qs, %qc : f32
    linalg.yield %sum : f32
  } -> tensor<?x2x16xf32>
  %flat = tensor.collapse_shape %acc [[0], [1, 2]] : tensor<?x2x16xf32> into tensor<?x32xf32>
  %cut = tensor.extract_slice %flat[0, 0] [%M, 20] [1, 1] : tensor<?x32xf32> to tensor<?x20xf32>
  %colsum = arith.constant dense<0.5> : tensor<20xf32>
  %bias = arith.constant dense<1.5> : tensor<20xf32>
  %ye = tensor.empty(%M) : tensor<?x20xf32>
  %result = linalg.generic {indexing_maps = [affine_map<(m, n) -> (m, n)>, affine_map<(m, n) -> (m)>, affine_map<(m, n) -> (m)>, affine_map<(m, n) -> (n)>, affine_map<(m, n) -> (n)>, affine_map<(m, n) -> (m, n)>], iterator_types = ["parallel", "parallel"]} ins(%cut, %params#2, %params#0, %colsum, %bias : tensor<?x20xf32>, tensor<?xf32>, tensor<?xf32>, tensor<20xf32>, tensor<20xf32>) outs(%ye : tensor<?x20xf32>) attrs = {etc.cpu.qdequant} {
  ^bb0(%y: f32, %z: f32, %s2: f32, %cs: f32, %b: f32, %o: f32):
    %zc = arith.mulf %z, %cs : f32
    %d = arith.subf %y, %zc : f32
    %r = math.fma %d, %s2, %b : f32
    linalg.yield %r : f32
  } -> tensor<?x20xf32>
  return %result : tensor<?x20xf32>
}

// -----

// A dynamic linear with int8 weights per channel and the activation quantized per tensor (one scale
// group: G = 1; K = 6 padded to 8, 2 rows of 4): q [M, K/4, 4], the weight's bytes as panels
// [NB, K/4, 16, 4]. The range is one vector min/max over every row first (K's tail read padded
// with 0), then per row q (the last vector of 8 read masked past K) and its sum; the accumulator
// starts at -128 * the row's sum of q (the weights' +128 offset), each 64-byte panel row is loaded once and xor
// 0x80 makes it w + 128 (an unsigned operand), one vpdpbusd per panel vector, then the scale;
// one group needs no f32 accumulator across groups, so the row tile is mr rows.
// CHECK: module attributes {etc.cpu.decisions = [{kind = "contraction", op = "linalg.generic", path = "gemm"
// CHECK-LABEL: func.func @linear8
// CHECK-NOT: etc.cpu.qgemm_dynamic
// CHECK-NOT: linalg.generic
// CHECK: scf.for {{.*}} -> (vector<16xf32>, vector<16xf32>)
// CHECK: vector.transfer_read %arg0[%{{.*}}, %{{.*}}], %{{.*}} : tensor<?x6xf32>, vector<16xf32>
// CHECK: vector.reduction <minimumf>
// CHECK: scf.for {{.*}} -> (tensor<?x8xi8>, tensor<?xf32>, tensor<?xf32>, tensor<?x1xi32>)
// CHECK: vector.transfer_read %arg0[%{{.*}}, %{{.*}}], %{{.*}} : tensor<?x6xf32>, vector<8xf32>
// CHECK: arith.constant -128 : i32
// CHECK-NOT: etc.thread_split
// CHECK: %[[QS:.*]] = tensor.cast %{{.*}} : tensor<?x1xi32> to tensor<?x1xi32>
// CHECK: arith.divui %{{.*}}, %{{.*}} : index
// CHECK: tensor.extract %[[QS]][%{{.*}}, %{{.*}}] : tensor<?x1xi32>
// CHECK: vector.transfer_read %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}], %{{.*}} {in_bounds = [true]} : tensor<2x2x64xi8>, vector<64xi8>
// CHECK-NEXT: arith.xori %{{.*}}, %{{.*}} : vector<64xi8>
// CHECK-NEXT: vector.transfer_read
// CHECK: vector.transfer_read %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}], %{{.*}} {in_bounds = [true]} : tensor<?x2x4xi8>, vector<4xi8>
// CHECK: llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.512"
// CHECK: arith.sitofp %{{.*}} : vector<16xi32> to vector<16xf32>
// CHECK: math.fma
// CHECK: vector.transfer_write %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] : vector<16xf32>, tensor<?x20xf32>
// AVX-LABEL: func.func @linear8
// AVX: llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.256"({{.*}}) : (vector<8xi32>, vector<32xi8>, vector<32xi8>) -> vector<8xi32>
// NONE-LABEL: func.func @linear8
// NONE: etc.cpu.decided
// NONE: etc.cpu.qdequant
func.func @linear8(%x: tensor<?x6xf32>, %w: tensor<2x2x16x4xi8>, %s: tensor<2x1x16xf32>) -> tensor<?x20xf32> {
  %c0 = arith.constant 0 : index
  %M = tensor.dim %x, %c0 : tensor<?x6xf32>
  %zero = arith.constant 0.0 : f32
  %re = tensor.empty(%M) : tensor<?xf32>
  %rs = tensor.empty() : tensor<f32>
  %r0 = linalg.fill ins(%zero : f32) outs(%rs : tensor<f32>) -> tensor<f32>
  %range:2 = linalg.generic {indexing_maps = [affine_map<(m, k) -> (m, k)>, affine_map<(m, k) -> ()>, affine_map<(m, k) -> ()>], iterator_types = ["reduction", "reduction"]} ins(%x : tensor<?x6xf32>) outs(%r0, %r0 : tensor<f32>, tensor<f32>) {
  ^bb0(%v: f32, %l: f32, %h: f32):
    %l2 = arith.minimumf %l, %v : f32
    %h2 = arith.maximumf %h, %v : f32
    linalg.yield %l2, %h2 : f32, f32
  } -> (tensor<f32>, tensor<f32>)
  %params:3 = linalg.generic {indexing_maps = [affine_map<(m) -> ()>, affine_map<(m) -> ()>, affine_map<(m) -> (m)>, affine_map<(m) -> (m)>, affine_map<(m) -> (m)>], iterator_types = ["parallel"]} ins(%range#0, %range#1 : tensor<f32>, tensor<f32>) outs(%re, %re, %re : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>) {
  ^bb0(%l: f32, %h: f32, %o1: f32, %o2: f32, %o3: f32):
    %c255 = arith.constant 255.0 : f32
    %floor = arith.constant 1.1920929E-7 : f32
    %one = arith.constant 1.0 : f32
    %qmin = arith.constant -128.0 : f32
    %qmax = arith.constant 127.0 : f32
    %d = arith.subf %h, %l : f32
    %s0 = arith.divf %d, %c255 : f32
    %sv = arith.maximumf %s0, %floor : f32
    %inv = arith.divf %one, %sv : f32
    %ls = arith.divf %l, %sv : f32
    %lr = math.roundeven %ls : f32
    %z0 = arith.subf %qmin, %lr : f32
    %z1 = arith.maximumf %z0, %qmin : f32
    %zz = arith.minimumf %z1, %qmax : f32
    linalg.yield %sv, %inv, %zz : f32, f32, f32
  } -> (tensor<?xf32>, tensor<?xf32>, tensor<?xf32>)
  %xp = tensor.pad %x low[0, 0] high[0, 2] {
  ^bb0(%i0: index, %i1: index):
    tensor.yield %zero : f32
  } : tensor<?x6xf32> to tensor<?x8xf32>
  %qe = tensor.empty(%M) : tensor<?x2x4xi8>
  %q = linalg.generic {indexing_maps = [affine_map<(m, kb, j) -> (m, kb * 4 + j)>, affine_map<(m, kb, j) -> (m)>, affine_map<(m, kb, j) -> (m)>, affine_map<(m, kb, j) -> (m, kb, j)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%xp, %params#1, %params#2 : tensor<?x8xf32>, tensor<?xf32>, tensor<?xf32>) outs(%qe : tensor<?x2x4xi8>) attrs = {etc.cpu.qquant = {granularity = "per_tensor", floor = 1.1920929E-7 : f32}} {
  ^bb0(%xv: f32, %iv: f32, %zv: f32, %o: i8):
    %qmin = arith.constant -128.0 : f32
    %qmax = arith.constant 127.0 : f32
    %y = arith.mulf %xv, %iv : f32
    %r = math.roundeven %y : f32
    %a = arith.addf %r, %zv : f32
    %c1 = arith.maximumf %a, %qmin : f32
    %c2 = arith.minimumf %c1, %qmax : f32
    %i = arith.fptosi %c2 : f32 to i8
    linalg.yield %i : i8
  } -> tensor<?x2x4xi8>
  %ae = tensor.empty(%M) : tensor<?x2x16xf32>
  %a0 = linalg.fill ins(%zero : f32) outs(%ae : tensor<?x2x16xf32>) -> tensor<?x2x16xf32>
  %acc = linalg.generic {indexing_maps = [affine_map<(m, nb, c, kb, j) -> (m, kb, j)>, affine_map<(m, nb, c, kb, j) -> (nb, kb, c, j)>, affine_map<(m, nb, c, kb, j) -> (nb, kb floordiv 2, c)>, affine_map<(m, nb, c, kb, j) -> (m, nb, c)>], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]} ins(%q, %w, %s : tensor<?x2x4xi8>, tensor<2x2x16x4xi8>, tensor<2x1x16xf32>) outs(%a0 : tensor<?x2x16xf32>) attrs = {etc.cpu.qgemm_dynamic = {bits = 8 : i64, group_size = 8 : i64}} {
  ^bb0(%qa: i8, %qb: i8, %qs: f32, %qc: f32):
    %a32 = arith.extsi %qa : i8 to i32
    %w32 = arith.extsi %qb : i8 to i32
    %pr = arith.muli %a32, %w32 : i32
    %pf = arith.sitofp %pr : i32 to f32
    %sum = math.fma %pf, %qs, %qc : f32
    linalg.yield %sum : f32
  } -> tensor<?x2x16xf32>
  %flat = tensor.collapse_shape %acc [[0], [1, 2]] : tensor<?x2x16xf32> into tensor<?x32xf32>
  %cut = tensor.extract_slice %flat[0, 0] [%M, 20] [1, 1] : tensor<?x32xf32> to tensor<?x20xf32>
  %colsum = arith.constant dense<0.5> : tensor<20xf32>
  %bias = arith.constant dense<1.5> : tensor<20xf32>
  %ye = tensor.empty(%M) : tensor<?x20xf32>
  %result = linalg.generic {indexing_maps = [affine_map<(m, n) -> (m, n)>, affine_map<(m, n) -> (m)>, affine_map<(m, n) -> (m)>, affine_map<(m, n) -> (n)>, affine_map<(m, n) -> (n)>, affine_map<(m, n) -> (m, n)>], iterator_types = ["parallel", "parallel"]} ins(%cut, %params#2, %params#0, %colsum, %bias : tensor<?x20xf32>, tensor<?xf32>, tensor<?xf32>, tensor<20xf32>, tensor<20xf32>) outs(%ye : tensor<?x20xf32>) attrs = {etc.cpu.qdequant} {
  ^bb0(%y: f32, %z: f32, %s2: f32, %cs: f32, %b: f32, %o: f32):
    %zc = arith.mulf %z, %cs : f32
    %d = arith.subf %y, %zc : f32
    %r = math.fma %d, %s2, %b : f32
    linalg.yield %r : f32
  } -> tensor<?x20xf32>
  return %result : tensor<?x20xf32>
}

// -----

// A convolution's qgemm packs its im2col per call (a 3x3 convolution, stride 1, over a padded
// [2, 7, 6] image: K = 18 in 5 groups of 4, P = 20 positions in 2 panels, the chain etc-cpu-lower-quantized
// emits). The gather is never built: the pack reads the image itself, flattened, at constant row
// offsets (%koffs) plus constant position offsets, each panel row of a K row from a few 16-byte loads
// and a shuffle, the four rows interleaved into one 64-byte panel row, flipped to unsigned, stored.
// Groups of K rows whose loads stay inside the image read unmasked; the last ones (near the image's
// end) read masked. One period of output rows is a loop (here one iteration), the last panel, with its
// positions past P clamped, follows. The periods and the rows of K write their own panel rows: their
// loops are marked etc.thread_split.
// CHECK-LABEL: func.func @conv
// CHECK-NOT: etc.cpu.im2col
// CHECK-NOT: linalg.transpose
// CHECK: %[[FLAT:.*]] = tensor.collapse_shape %arg0 {{\[}}[0, 1, 2]] : tensor<2x7x6xi8> into tensor<84xi8>
// CHECK: arith.constant dense<[0, 1, 2, 6, 7, 8, 12, 13, 14, 42, 43, 44, 48, 49, 50, 54, 55, 56, 56, 56]> : tensor<20xi32>
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step
// CHECK: vector.transfer_read %[[FLAT]][%{{.*}}], %{{.*}} {in_bounds = [true]} : tensor<84xi8>, vector<16xi8>
// CHECK: vector.shuffle
// CHECK: arith.xori %{{.*}}, %{{.*}} : vector<64xi8>
// CHECK: vector.transfer_write %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] {in_bounds = [true]} : vector<64xi8>, tensor<2x5x64xi8>
// CHECK: } {etc.thread_split}
// CHECK: vector.transfer_read %[[FLAT]][%{{.*}}], %{{[a-z0-9_]+}} : tensor<84xi8>, vector<16xi8>
// CHECK: } {etc.thread_split}
// CHECK-NEXT: scf.yield
// CHECK-NEXT: } {etc.thread_split}
// CHECK: llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.512"
func.func @conv(%x: tensor<2x7x6xi8>, %a: tensor<3x5x4xi8>) -> tensor<3x20xi8> {
  %c0_i32 = arith.constant 0 : i32
  %c0_i8 = arith.constant 0 : i8
  %corr = arith.constant dense<[100, -20, 7]> : tensor<3xi32>
  %mult = arith.constant dense<0.01> : tensor<3xf32>
  %bias = arith.constant dense<0.5> : tensor<3xf32>
  %zp = arith.constant -3.0 : f32
  %lo = arith.constant -128.0 : f32
  %hi = arith.constant 127.0 : f32
  %ce = tensor.empty() : tensor<2x3x3x5x4xi8>
  %col = linalg.generic {indexing_maps = [affine_map<(c, kh, kw, oh, ow) -> (c, oh + kh, ow + kw)>, affine_map<(c, kh, kw, oh, ow) -> (c, kh, kw, oh, ow)>], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%x : tensor<2x7x6xi8>) outs(%ce : tensor<2x3x3x5x4xi8>) attrs = {etc.cpu.im2col = {dilation = array<i64: 1, 1>, stride = array<i64: 1, 1>}} {
  ^bb0(%cx: i8, %co: i8):
    %cflip = arith.constant -128 : i8
    %cu = arith.xori %cx, %cflip : i8
    linalg.yield %cu : i8
  } -> tensor<2x3x3x5x4xi8>
  %kp = tensor.collapse_shape %col [[0, 1, 2], [3, 4]] : tensor<2x3x3x5x4xi8> into tensor<18x20xi8>
  %padded = tensor.pad %kp low[0, 0] high[2, 12] {
  ^bb0(%i0: index, %i1: index):
    tensor.yield %c0_i8 : i8
  } : tensor<18x20xi8> to tensor<20x32xi8>
  %ex = tensor.expand_shape %padded [[0, 1], [2, 3]] output_shape [5, 4, 2, 16] : tensor<20x32xi8> into tensor<5x4x2x16xi8>
  %pe = tensor.empty() : tensor<2x5x16x4xi8>
  %b = linalg.transpose ins(%ex : tensor<5x4x2x16xi8>) outs(%pe : tensor<2x5x16x4xi8>) permutation = [2, 0, 3, 1]
  %5 = tensor.empty() : tensor<3x2x16xi32>
  %6 = linalg.fill ins(%c0_i32 : i32) outs(%5 : tensor<3x2x16xi32>) -> tensor<3x2x16xi32>
  %7 = linalg.generic {indexing_maps = [affine_map<(m, nb, nl, kb, kl) -> (m, kb, kl)>, affine_map<(m, nb, nl, kb, kl) -> (nb, kb, nl, kl)>, affine_map<(m, nb, nl, kb, kl) -> (m, nb, nl)>], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]} ins(%a, %b : tensor<3x5x4xi8>, tensor<2x5x16x4xi8>) outs(%6 : tensor<3x2x16xi32>) attrs = {etc.cpu.qgemm = {a_unsigned = false, kind = "convolution"}} {
  ^bb0(%in: i8, %in_8: i8, %out: i32):
    %12 = arith.extsi %in : i8 to i32
    %13 = arith.extui %in_8 : i8 to i32
    %14 = arith.muli %12, %13 : i32
    %15 = arith.addi %out, %14 : i32
    linalg.yield %15 : i32
  } -> tensor<3x2x16xi32>
  %collapsed = tensor.collapse_shape %7 [[0], [1, 2]] : tensor<3x2x16xi32> into tensor<3x32xi32>
  %slice = tensor.extract_slice %collapsed[0, 0] [3, 20] [1, 1] : tensor<3x32xi32> to tensor<3x20xi32>
  %8 = tensor.empty() : tensor<3x20xi8>
  %9 = linalg.generic {indexing_maps = [affine_map<(m, n) -> (m, n)>, affine_map<(m, n) -> (m)>, affine_map<(m, n) -> (m)>, affine_map<(m, n) -> (m)>, affine_map<(m, n) -> (m, n)>], iterator_types = ["parallel", "parallel"]} ins(%slice, %corr, %mult, %bias : tensor<3x20xi32>, tensor<3xi32>, tensor<3xf32>, tensor<3xf32>) outs(%8 : tensor<3x20xi8>) attrs = {etc.cpu.requant = {max = 127 : i64, min = -128 : i64, per = "row", zero_point = -3 : i64}} {
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
  } -> tensor<3x20xi8>
  return %9 : tensor<3x20xi8>
}

// -----

// A convolution's qgemm as etc-cpu-lower-quantized emits it (2 -> 4 channels, 3x3, an 8x5 image:
// 18 output positions, one whole panel and 2 columns), with its im2col chain. The pack reads the
// image (no gather is built); the last panel holds its 2 columns one after another, each
// position's 4-byte groups of K contiguous (at (c * KB + kb) * 4: a 4-byte store each). The
// tiles compute the whole panel, reading the filter as rows [4, 20] (the 4 bytes at kb * 4: the
// kernel's one view of A, which the tail reads too, so that it stays one constant); the 2 tail columns are dot products
// along K after them: a 64-byte run of a filter row times one of the column per vpdpbusd (K = 20
// bytes: one masked run, no loop), the lanes summed, requantized on the scalar and inserted at
// columns 16 and 17.
// CHECK-LABEL: func.func @conv
// CHECK-NOT: etc.cpu.im2col
// CHECK: vector.transfer_write %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] {in_bounds = [true]} : vector<4xi8>, tensor<2x5x64xi8>
// CHECK: %[[AROWS:.*]] = tensor.collapse_shape %{{.*}} {{\[}}[0], [1, 2]] : tensor<4x5x4xi8> into tensor<4x20xi8>
// CHECK: tensor.collapse_shape %{{.*}} {{\[}}[0, 1, 2, 3]] : tensor<2x5x16x4xi8> into tensor<640xi8>
// CHECK: %{{.*}}:4 = scf.for %[[KB:[a-z0-9_]+]] = 
// CHECK: %[[KB4:.*]] = arith.muli %[[KB]], %{{.*}} : index
// CHECK: vector.transfer_read %[[AROWS]][%{{.*}}, %[[KB4]]], %{{.*}} {in_bounds = [true]} : tensor<4x20xi8>, vector<4xi8>
// CHECK: } {etc.cpu.int8_k_loop}
// CHECK: vector.transfer_read %{{.*}}[%{{.*}}], %{{.*}} : tensor<640xi8>, vector<64xi8>
// CHECK: vector.transfer_read %{{.*}}[%{{.*}}], %{{.*}} : tensor<640xi8>, vector<64xi8>
// CHECK: vector.transfer_read %{{.*}}[%{{.*}}, %{{.*}}], %{{.*}} : tensor<4x20xi8>, vector<64xi8>
// CHECK: llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.512"
// CHECK: vector.reduction <add>, %{{.*}} : vector<16xi32> into i32
// CHECK: math.roundeven %{{.*}} : f32
// CHECK: tensor.insert %{{.*}} into %{{.*}}[%{{.*}}, %c16{{.*}}] : tensor<4x18xi8>
// CHECK: tensor.insert %{{.*}} into %{{.*}}[%{{.*}}, %c17{{.*}}] : tensor<4x18xi8>
// Without a dot product there is no kernel, and the pack keeps the panel layout.
// NONE-LABEL: func.func @conv
// NONE-NOT: vector<4xi8>, tensor<2x5x64xi8>
func.func @conv(%x: tensor<1x2x8x5xi8>, %w: tensor<4x2x3x3xi8>) -> tensor<1x4x6x3xi8> {
  %c3_i8 = arith.constant 3 : i8
  %collapsed = tensor.collapse_shape %w [[0], [1, 2, 3]] : tensor<4x2x3x3xi8> into tensor<4x18xi8>
  %c0_i8 = arith.constant 0 : i8
  %padded = tensor.pad %collapsed low[0, 0] high[0, 2] {
  ^bb0(%arg4: index, %arg5: index):
    tensor.yield %c0_i8 : i8
  } : tensor<4x18xi8> to tensor<4x20xi8>
  %expanded = tensor.expand_shape %padded [[0], [1, 2]] output_shape [4, 5, 4] : tensor<4x20xi8> into tensor<4x5x4xi8>
  %extracted_slice = tensor.extract_slice %x[0, 0, 0, 0] [1, 2, 8, 5] [1, 1, 1, 1] : tensor<1x2x8x5xi8> to tensor<2x8x5xi8>
  %5 = tensor.empty() : tensor<2x3x3x6x3xi8>
  %6 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3, d4) -> (d0, d1 + d3, d2 + d4)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%extracted_slice : tensor<2x8x5xi8>) outs(%5 : tensor<2x3x3x6x3xi8>) attrs =  {etc.cpu.im2col = {dilation = array<i64: 1, 1>, stride = array<i64: 1, 1>}} {
  ^bb0(%in: i8, %out: i8):
    %c-128_i8 = arith.constant -128 : i8
    %14 = arith.xori %in, %c-128_i8 : i8
    linalg.yield %14 : i8
  } -> tensor<2x3x3x6x3xi8>
  %collapsed_0 = tensor.collapse_shape %6 [[0, 1, 2], [3, 4]] : tensor<2x3x3x6x3xi8> into tensor<18x18xi8>
  %padded_1 = tensor.pad %collapsed_0 low[0, 0] high[2, 14] {
  ^bb0(%arg4: index, %arg5: index):
    tensor.yield %c0_i8 : i8
  } : tensor<18x18xi8> to tensor<20x32xi8>
  %expanded_2 = tensor.expand_shape %padded_1 [[0, 1], [2, 3]] output_shape [5, 4, 2, 16] : tensor<20x32xi8> into tensor<5x4x2x16xi8>
  %7 = tensor.empty() : tensor<2x5x16x4xi8>
  %transposed = linalg.transpose ins(%expanded_2 : tensor<5x4x2x16xi8>) outs(%7 : tensor<2x5x16x4xi8>) permutation = [2, 0, 3, 1] 
  %c0_i32 = arith.constant 0 : i32
  %8 = tensor.empty() : tensor<4x2x16xi32>
  %9 = linalg.fill ins(%c0_i32 : i32) outs(%8 : tensor<4x2x16xi32>) -> tensor<4x2x16xi32>
  %10 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3, d4) -> (d0, d3, d4)>, affine_map<(d0, d1, d2, d3, d4) -> (d1, d3, d2, d4)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]} ins(%expanded, %transposed : tensor<4x5x4xi8>, tensor<2x5x16x4xi8>) outs(%9 : tensor<4x2x16xi32>) attrs =  {etc.cpu.qgemm = {a_unsigned = false, kind = "convolution"}} {
  ^bb0(%in: i8, %in_11: i8, %out: i32):
    %14 = arith.extsi %in : i8 to i32
    %15 = arith.extui %in_11 : i8 to i32
    %16 = arith.muli %14, %15 : i32
    %17 = arith.addi %out, %16 : i32
    linalg.yield %17 : i32
  } -> tensor<4x2x16xi32>
  %collapsed_3 = tensor.collapse_shape %10 [[0], [1, 2]] : tensor<4x2x16xi32> into tensor<4x32xi32>
  %extracted_slice_4 = tensor.extract_slice %collapsed_3[0, 0] [4, 18] [1, 1] : tensor<4x32xi32> to tensor<4x18xi32>
  %cst = arith.constant dense<[8253, 4585, -60915, 81482]> : tensor<4xi32>
  %cst_5 = arith.constant dense<[0.00399999972, 0.00799999944, 6.000000e-03, 1.200000e-02]> : tensor<4xf32>
  %cst_6 = arith.constant dense<[1.000000e+01, -2.000000e+01, 4.000000e+01, 0.000000e+00]> : tensor<4xf32>
  %cst_7 = arith.constant -5.000000e+00 : f32
  %cst_8 = arith.constant -5.000000e+00 : f32
  %cst_9 = arith.constant 1.270000e+02 : f32
  %11 = tensor.empty() : tensor<4x18xi8>
  %12 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%extracted_slice_4, %cst, %cst_5, %cst_6 : tensor<4x18xi32>, tensor<4xi32>, tensor<4xf32>, tensor<4xf32>) outs(%11 : tensor<4x18xi8>) attrs =  {etc.cpu.requant = {max = 127 : i64, min = -5 : i64, per = "row", zero_point = -5 : i64}} {
  ^bb0(%in: i32, %in_11: i32, %in_12: f32, %in_13: f32, %out: i8):
    %14 = arith.subi %in, %in_11 : i32
    %15 = arith.sitofp %14 : i32 to f32
    %16 = math.fma %15, %in_12, %in_13 : f32
    %17 = math.roundeven %16 : f32
    %18 = arith.addf %17, %cst_7 : f32
    %19 = arith.maximumf %18, %cst_8 : f32
    %20 = arith.minimumf %19, %cst_9 : f32
    %21 = arith.fptosi %20 : f32 to i8
    linalg.yield %21 : i8
  } -> tensor<4x18xi8>
  %expanded_10 = tensor.expand_shape %12 [[0, 1], [2, 3]] output_shape [1, 4, 6, 3] : tensor<4x18xi8> into tensor<1x4x6x3xi8>
  return %expanded_10 : tensor<1x4x6x3xi8>
}
// -----

// A convolution with K tap by tap (taps_first: 4 channels x 3x3 taps, stride 1, a 4x4 output in
// one panel) reads B in place: the image is copied once per column tap kw with its 4 channels
// interleaved into words (a plane: 6 rows of OW = 4 words, rounded up to 32, and 16 words of
// slack: 48; 3 planes = 576 bytes), a loop over the rows (each its own: etc.thread_split) and
// the planes, a row's 4 words the first 16 bytes of its interleaved vector (nothing stored past
// the row). The kernel reads row kb of panel nb at %kbytes[kb] + 64 * nb:
// group kb = (kh, kw) at byte 4 * (kw * 48 + kh * 4). No packed panels: the im2col chain is gone.
// CHECK-LABEL: func.func @conv_taps_first
// CHECK-NOT: linalg.transpose
// CHECK: %[[FLAT:.*]] = tensor.collapse_shape %arg0 {{\[}}[0, 1, 2]] : tensor<4x6x6xi8> into tensor<144xi8>
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (tensor<576xi8>) {
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (tensor<576xi8>) {
// CHECK-COUNT-4: vector.transfer_read %[[FLAT]][%{{.*}}], %{{.*}} : tensor<144xi8>, vector<16xi8>
// CHECK: arith.xori %{{.*}}, %{{.*}} : vector<64xi8>
// CHECK: vector.extract_strided_slice %{{.*}} {offsets = [0], sizes = [16], strides = [1]} : vector<64xi8> to vector<16xi8>
// CHECK: vector.transfer_write %{{.*}}, %{{.*}}[%{{.*}}] {in_bounds = [true]} : vector<16xi8>, tensor<576xi8>
// CHECK: } {etc.thread_split}
// CHECK: %[[KBYTES:.*]] = arith.constant dense<[0, 192, 384, 16, 208, 400, 32, 224, 416]> : tensor<9xi32>
// CHECK: scf.for %[[KB:[a-z0-9_]+]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args({{.*}}) -> (vector<16xi32>
// CHECK-NEXT: tensor.extract %[[KBYTES]][%[[KB]]] : tensor<9xi32>
// CHECK: vector.transfer_read %{{.*}}[%{{.*}}], %{{.*}} {in_bounds = [true]} : tensor<576xi8>, vector<64xi8>
// CHECK: llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.512"
// CHECK: } {etc.cpu.int8_k_loop}
// Without a dot-product instruction the panels are packed, K in the gather's order: each group's
// 4 rows at tap (kh, kw), channels c..c+3 (36 bytes a channel), kh * 6 + kw.
// NONE-LABEL: func.func @conv_taps_first
// NONE: arith.constant dense<[0, 36, 72, 108, 1, 37, 73, 109, 2, 38, 74, 110, 6, 42, 78, 114,
func.func @conv_taps_first(%x: tensor<4x6x6xi8>, %a: tensor<3x9x4xi8>) -> tensor<3x16xi8> {
  %c0_i32 = arith.constant 0 : i32
  %corr = arith.constant dense<[100, -20, 7]> : tensor<3xi32>
  %mult = arith.constant dense<0.01> : tensor<3xf32>
  %bias = arith.constant dense<0.5> : tensor<3xf32>
  %zp = arith.constant -3.0 : f32
  %lo = arith.constant -128.0 : f32
  %hi = arith.constant 127.0 : f32
  %ce = tensor.empty() : tensor<3x3x4x4x4xi8>
  %col = linalg.generic {indexing_maps = [affine_map<(kh, kw, c, oh, ow) -> (c, oh + kh, ow + kw)>, affine_map<(kh, kw, c, oh, ow) -> (kh, kw, c, oh, ow)>], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%x : tensor<4x6x6xi8>) outs(%ce : tensor<3x3x4x4x4xi8>) attrs = {etc.cpu.im2col = {dilation = array<i64: 1, 1>, stride = array<i64: 1, 1>, taps_first}} {
  ^bb0(%cx: i8, %co: i8):
    %cflip = arith.constant -128 : i8
    %cu = arith.xori %cx, %cflip : i8
    linalg.yield %cu : i8
  } -> tensor<3x3x4x4x4xi8>
  %kp = tensor.collapse_shape %col [[0, 1, 2], [3, 4]] : tensor<3x3x4x4x4xi8> into tensor<36x16xi8>
  %ex = tensor.expand_shape %kp [[0, 1], [2, 3]] output_shape [9, 4, 1, 16] : tensor<36x16xi8> into tensor<9x4x1x16xi8>
  %pe = tensor.empty() : tensor<1x9x16x4xi8>
  %b = linalg.transpose ins(%ex : tensor<9x4x1x16xi8>) outs(%pe : tensor<1x9x16x4xi8>) permutation = [2, 0, 3, 1]
  %5 = tensor.empty() : tensor<3x1x16xi32>
  %6 = linalg.fill ins(%c0_i32 : i32) outs(%5 : tensor<3x1x16xi32>) -> tensor<3x1x16xi32>
  %7 = linalg.generic {indexing_maps = [affine_map<(m, nb, nl, kb, kl) -> (m, kb, kl)>, affine_map<(m, nb, nl, kb, kl) -> (nb, kb, nl, kl)>, affine_map<(m, nb, nl, kb, kl) -> (m, nb, nl)>], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]} ins(%a, %b : tensor<3x9x4xi8>, tensor<1x9x16x4xi8>) outs(%6 : tensor<3x1x16xi32>) attrs = {etc.cpu.qgemm = {a_unsigned = false, kind = "convolution"}} {
  ^bb0(%in: i8, %in_8: i8, %out: i32):
    %12 = arith.extsi %in : i8 to i32
    %13 = arith.extui %in_8 : i8 to i32
    %14 = arith.muli %12, %13 : i32
    %15 = arith.addi %out, %14 : i32
    linalg.yield %15 : i32
  } -> tensor<3x1x16xi32>
  %collapsed = tensor.collapse_shape %7 [[0], [1, 2]] : tensor<3x1x16xi32> into tensor<3x16xi32>
  %8 = tensor.empty() : tensor<3x16xi8>
  %9 = linalg.generic {indexing_maps = [affine_map<(m, n) -> (m, n)>, affine_map<(m, n) -> (m)>, affine_map<(m, n) -> (m)>, affine_map<(m, n) -> (m)>, affine_map<(m, n) -> (m, n)>], iterator_types = ["parallel", "parallel"]} ins(%collapsed, %corr, %mult, %bias : tensor<3x16xi32>, tensor<3xi32>, tensor<3xf32>, tensor<3xf32>) outs(%8 : tensor<3x16xi8>) attrs = {etc.cpu.requant = {max = 127 : i64, min = -128 : i64, per = "row", zero_point = -3 : i64}} {
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
  } -> tensor<3x16xi8>
  return %9 : tensor<3x16xi8>
}

// -----

// Output rows of whole panels (OW = 16) need no copy per column tap: one copy of the padded
// image (rows of Wp = 18 words, a plane of 3 rows rounded up to 64 words and 16 of slack: 320
// bytes), a tap (kh, kw) is a shift by kh rows and kw words: group kb at byte 4 * (kh * 18 + kw).
// CHECK-LABEL: func.func @conv_taps_first_rows_of_panels
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (tensor<320xi8>) {
// CHECK: } {etc.thread_split}
// CHECK: arith.constant dense<[0, 4, 8, 72, 76, 80, 144, 148, 152]> : tensor<9xi32>
// CHECK: vector.transfer_read %{{.*}}[%{{.*}}], %{{.*}} {in_bounds = [true]} : tensor<320xi8>, vector<64xi8>
// CHECK: } {etc.cpu.int8_k_loop}
func.func @conv_taps_first_rows_of_panels(%x: tensor<4x3x18xi8>, %a: tensor<3x9x4xi8>) -> tensor<3x16xi8> {
  %c0_i32 = arith.constant 0 : i32
  %corr = arith.constant dense<[100, -20, 7]> : tensor<3xi32>
  %mult = arith.constant dense<0.01> : tensor<3xf32>
  %bias = arith.constant dense<0.5> : tensor<3xf32>
  %zp = arith.constant -3.0 : f32
  %lo = arith.constant -128.0 : f32
  %hi = arith.constant 127.0 : f32
  %ce = tensor.empty() : tensor<3x3x4x1x16xi8>
  %col = linalg.generic {indexing_maps = [affine_map<(kh, kw, c, oh, ow) -> (c, oh + kh, ow + kw)>, affine_map<(kh, kw, c, oh, ow) -> (kh, kw, c, oh, ow)>], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%x : tensor<4x3x18xi8>) outs(%ce : tensor<3x3x4x1x16xi8>) attrs = {etc.cpu.im2col = {dilation = array<i64: 1, 1>, stride = array<i64: 1, 1>, taps_first}} {
  ^bb0(%cx: i8, %co: i8):
    %cflip = arith.constant -128 : i8
    %cu = arith.xori %cx, %cflip : i8
    linalg.yield %cu : i8
  } -> tensor<3x3x4x1x16xi8>
  %kp = tensor.collapse_shape %col [[0, 1, 2], [3, 4]] : tensor<3x3x4x1x16xi8> into tensor<36x16xi8>
  %ex = tensor.expand_shape %kp [[0, 1], [2, 3]] output_shape [9, 4, 1, 16] : tensor<36x16xi8> into tensor<9x4x1x16xi8>
  %pe = tensor.empty() : tensor<1x9x16x4xi8>
  %b = linalg.transpose ins(%ex : tensor<9x4x1x16xi8>) outs(%pe : tensor<1x9x16x4xi8>) permutation = [2, 0, 3, 1]
  %5 = tensor.empty() : tensor<3x1x16xi32>
  %6 = linalg.fill ins(%c0_i32 : i32) outs(%5 : tensor<3x1x16xi32>) -> tensor<3x1x16xi32>
  %7 = linalg.generic {indexing_maps = [affine_map<(m, nb, nl, kb, kl) -> (m, kb, kl)>, affine_map<(m, nb, nl, kb, kl) -> (nb, kb, nl, kl)>, affine_map<(m, nb, nl, kb, kl) -> (m, nb, nl)>], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]} ins(%a, %b : tensor<3x9x4xi8>, tensor<1x9x16x4xi8>) outs(%6 : tensor<3x1x16xi32>) attrs = {etc.cpu.qgemm = {a_unsigned = false, kind = "convolution"}} {
  ^bb0(%in: i8, %in_8: i8, %out: i32):
    %12 = arith.extsi %in : i8 to i32
    %13 = arith.extui %in_8 : i8 to i32
    %14 = arith.muli %12, %13 : i32
    %15 = arith.addi %out, %14 : i32
    linalg.yield %15 : i32
  } -> tensor<3x1x16xi32>
  %collapsed = tensor.collapse_shape %7 [[0], [1, 2]] : tensor<3x1x16xi32> into tensor<3x16xi32>
  %8 = tensor.empty() : tensor<3x16xi8>
  %9 = linalg.generic {indexing_maps = [affine_map<(m, n) -> (m, n)>, affine_map<(m, n) -> (m)>, affine_map<(m, n) -> (m)>, affine_map<(m, n) -> (m)>, affine_map<(m, n) -> (m, n)>], iterator_types = ["parallel", "parallel"]} ins(%collapsed, %corr, %mult, %bias : tensor<3x16xi32>, tensor<3xi32>, tensor<3xf32>, tensor<3xf32>) outs(%8 : tensor<3x16xi8>) attrs = {etc.cpu.requant = {max = 127 : i64, min = -128 : i64, per = "row", zero_point = -3 : i64}} {
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
  } -> tensor<3x16xi8>
  return %9 : tensor<3x16xi8>
}
