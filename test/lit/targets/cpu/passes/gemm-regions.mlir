// RUN: etc-opt %s --split-input-file --etc-cpu-gemm-kernels --etc-cpu-fuse-elementwise --etc-cpu-gemm-regions | filecheck %s

// A matmul on an activation: the accumulator starts at a constant (a generic the tiling fuses
// into each tile) and the bias + GELU-like consumer, read through the unit-dimension reshape to
// [1, 32, 256], becomes the kernel's epilogue: the body moves in, and the kernel returns the
// consumer's shape. B is read in place, so the tile layout is [b, rows, cols] (the tiling splits
// the columns into panels, never padded), and the bias is read as it is.
// CHECK: {kind = "epilogue", op = "linalg.generic", path = "fused"
// CHECK-LABEL: func.func @linear
// CHECK: %[[R:.*]] = call @[[K:etc_gemm_m[0-9]+]](%arg0, %arg1, %arg2) : (tensor<32x128xf32>, tensor<128x256xf32>, tensor<256xf32>) -> tensor<1x32x256xf32>
// CHECK-NEXT: return %[[R]]
// CHECK: func.func private @[[K]]
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : tensor<1x32x256xf32>){{.*}}etc.[[K]]_init
// CHECK: arith.constant 0.000000e+00 : f32
// CHECK: linalg.generic {{.*}} ins(%arg0, %arg1 : tensor<32x128xf32>, tensor<128x256xf32>){{.*}}{etc.[[K]]}
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %arg2 : tensor<1x32x256xf32>, tensor<256xf32>){{.*}}etc.[[K]]_epi
// CHECK: math.tanh
// CHECK: return %{{.*}} : tensor<1x32x256xf32>
#id3 = affine_map<(b, t, n) -> (b, t, n)>
#n3 = affine_map<(b, t, n) -> (n)>
func.func @linear(%x: tensor<32x128xf32>, %w: tensor<128x256xf32>, %bias: tensor<256xf32>) -> tensor<1x32x256xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<32x256xf32>
  %c = linalg.fill ins(%z : f32) outs(%e : tensor<32x256xf32>) -> tensor<32x256xf32>
  %r = linalg.matmul ins(%x, %w : tensor<32x128xf32>, tensor<128x256xf32>) outs(%c : tensor<32x256xf32>) -> tensor<32x256xf32>
  %r3 = tensor.expand_shape %r [[0, 1], [2]] output_shape [1, 32, 256] : tensor<32x256xf32> into tensor<1x32x256xf32>
  %e3 = tensor.empty() : tensor<1x32x256xf32>
  %y = linalg.generic {indexing_maps = [#id3, #n3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%r3, %bias : tensor<1x32x256xf32>, tensor<256xf32>) outs(%e3 : tensor<1x32x256xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.addf %a, %b : f32
    %t = math.tanh %s : f32
    linalg.yield %t : f32
  } -> tensor<1x32x256xf32>
  return %y : tensor<1x32x256xf32>
}

// -----

// A convolution with its bias broadcast as the accumulator's start, then BN-folded scale,
// residual add and ReLU: the residual [1, 32, 8, 8] is reshaped into the tile layout
// [1, 32, 64] (filters as rows, pixels as columns), the per-filter scale is read
// along the rows, and the call moves to the consumer (the residual is computed after the conv).
// CHECK-LABEL: func.func @conv_residual
// CHECK: %[[RES:.*]] = call @etc_gemm_c{{[0-9]+}}(
// CHECK: %[[R:.*]] = call @[[K:etc_gemm_c[0-9]+]](%arg1, %arg0, %arg2, %arg3, %[[RES]])
// CHECK-NEXT: return %[[R]]
// CHECK: func.func private @[[K]]
// CHECK: linalg.generic {{.*}} ins(%arg2 : tensor<32xf32>){{.*}}etc.[[K]]_init
// CHECK: tensor.collapse_shape %arg4 {{\[\[}}0], [1], [2, 3]] : tensor<1x32x8x8xf32> into tensor<1x32x64xf32>
// CHECK: ins(%{{.*}}, %arg3, %{{.*}} : tensor<1x32x64xf32>, tensor<32xf32>, tensor<1x32x64xf32>){{.*}}etc.[[K]]_epi
// CHECK: arith.maximumf
#i4 = affine_map<(n, c, h, w) -> (n, c, h, w)>
#c4 = affine_map<(n, c, h, w) -> (c)>
func.func @conv_residual(%x: tensor<1x16x10x10xf32>, %w: tensor<32x16x3x3xf32>, %bias: tensor<32xf32>, %scale: tensor<32xf32>) -> tensor<1x32x8x8xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x32x8x8xf32>
  %b = linalg.broadcast ins(%bias : tensor<32xf32>) outs(%e : tensor<1x32x8x8xf32>) dimensions = [0, 2, 3]
  %c = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
      ins(%x, %w : tensor<1x16x10x10xf32>, tensor<32x16x3x3xf32>) outs(%b : tensor<1x32x8x8xf32>) -> tensor<1x32x8x8xf32>
  %w2 = tensor.empty() : tensor<32x16x1x1xf32>
  %wz = linalg.fill ins(%z : f32) outs(%w2 : tensor<32x16x1x1xf32>) -> tensor<32x16x1x1xf32>
  %xs = tensor.extract_slice %x[0, 0, 1, 1] [1, 16, 8, 8] [1, 1, 1, 1] : tensor<1x16x10x10xf32> to tensor<1x16x8x8xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<1x32x8x8xf32>) -> tensor<1x32x8x8xf32>
  %res = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
      ins(%xs, %wz : tensor<1x16x8x8xf32>, tensor<32x16x1x1xf32>) outs(%f : tensor<1x32x8x8xf32>) -> tensor<1x32x8x8xf32>
  %y = linalg.generic {indexing_maps = [#i4, #c4, #i4, #i4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%c, %scale, %res : tensor<1x32x8x8xf32>, tensor<32xf32>, tensor<1x32x8x8xf32>) outs(%e : tensor<1x32x8x8xf32>) {
  ^bb0(%a: f32, %s: f32, %r: f32, %o: f32):
    %m = arith.mulf %a, %s : f32
    %p = arith.addf %m, %r : f32
    %q = arith.maximumf %p, %z : f32
    linalg.yield %q : f32
  } -> tensor<1x32x8x8xf32>
  return %y : tensor<1x32x8x8xf32>
}

// -----

// A consumer that reads the result transposed cannot finish a tile in registers: it stays a
// second pass, a decision with the reason; a result with two users has no epilogue at all.
// CHECK: {kind = "epilogue", op = "linalg.generic", path = "second-pass", reason = "the consumer reads the contraction's result permuted"
// CHECK-LABEL: func.func @not_fused
// CHECK: %[[R:.*]] = call @etc_gemm_m{{[0-9]+}}(%arg0, %arg1) : (tensor<64x96xf32>, tensor<96x64xf32>) -> tensor<64x64xf32>
// CHECK: linalg.generic {{.*}} ins(%[[R]]
// CHECK: %[[R2:.*]] = call @etc_gemm_m{{[0-9]+}}(%arg0, %arg1) : (tensor<64x96xf32>, tensor<96x64xf32>) -> tensor<64x64xf32>
// CHECK: linalg.generic {{.*}} ins(%[[R2]]
// CHECK: return %{{.*}}, %{{.*}}, %[[R2]]
#mn = affine_map<(m, n) -> (m, n)>
#nm = affine_map<(m, n) -> (n, m)>
func.func @not_fused(%a: tensor<64x96xf32>, %b: tensor<96x64xf32>) -> (tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>) {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x64xf32>
  %c = linalg.fill ins(%z : f32) outs(%e : tensor<64x64xf32>) -> tensor<64x64xf32>
  %r = linalg.matmul ins(%a, %b : tensor<64x96xf32>, tensor<96x64xf32>) outs(%c : tensor<64x64xf32>) -> tensor<64x64xf32>
  %t = linalg.generic {indexing_maps = [#nm, #mn], iterator_types = ["parallel", "parallel"]} ins(%r : tensor<64x64xf32>) outs(%e : tensor<64x64xf32>) {
  ^bb0(%x: f32, %o: f32):
    %m = arith.maximumf %x, %z : f32
    linalg.yield %m : f32
  } -> tensor<64x64xf32>
  %r2 = linalg.matmul ins(%a, %b : tensor<64x96xf32>, tensor<96x64xf32>) outs(%c : tensor<64x64xf32>) -> tensor<64x64xf32>
  %u = linalg.generic {indexing_maps = [#mn, #mn], iterator_types = ["parallel", "parallel"]} ins(%r2 : tensor<64x64xf32>) outs(%e : tensor<64x64xf32>) {
  ^bb0(%x: f32, %o: f32):
    %m = arith.maximumf %x, %z : f32
    linalg.yield %m : f32
  } -> tensor<64x64xf32>
  return %t, %u, %r2 : tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>
}

// -----

// A consumer that writes more elements than the contraction has (squeeze-excitation's gate, one
// value per channel, times a feature map [196, 256]) reads the result broadcast: no epilogue to
// finish in registers (fused, the gate would be computed once per element) but its own pass over
// the stored result, the `broadcast` path (tuned), not a second-pass fallback.
// CHECK: {kind = "epilogue", op = "linalg.generic", path = "broadcast", reason = "the consumer broadcasts the result over a larger shape (a channel scale)"
// CHECK-LABEL: func.func @gate
// CHECK: %[[G:.*]] = call @etc_gemm_m{{[0-9]+}}(%arg0, %arg1) : (tensor<1x512xf32>, tensor<512x256xf32>) -> tensor<1x256xf32>
// CHECK: linalg.generic {{.*}} ins(%[[G]], %arg2
#g = affine_map<(p, c) -> (0, c)>
#pc = affine_map<(p, c) -> (p, c)>
func.func @gate(%v: tensor<1x512xf32>, %w: tensor<512x256xf32> {etc.cpu.arg = "constant:w"}, %x: tensor<196x256xf32>) -> tensor<196x256xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x256xf32>
  %c = linalg.fill ins(%z : f32) outs(%e : tensor<1x256xf32>) -> tensor<1x256xf32>
  %r = linalg.matmul ins(%v, %w : tensor<1x512xf32>, tensor<512x256xf32>) outs(%c : tensor<1x256xf32>) -> tensor<1x256xf32>
  %e2 = tensor.empty() : tensor<196x256xf32>
  %y = linalg.generic {indexing_maps = [#g, #pc, #pc], iterator_types = ["parallel", "parallel"]} ins(%r, %x : tensor<1x256xf32>, tensor<196x256xf32>) outs(%e2 : tensor<196x256xf32>) {
  ^bb0(%s: f32, %a: f32, %o: f32):
    %n = arith.negf %s : f32
    %ex = math.exp %n : f32
    %one = arith.constant 1.0 : f32
    %d = arith.addf %one, %ex : f32
    %sig = arith.divf %one, %d : f32
    %m = arith.mulf %a, %sig : f32
    linalg.yield %m : f32
  } -> tensor<196x256xf32>
  return %y : tensor<196x256xf32>
}
