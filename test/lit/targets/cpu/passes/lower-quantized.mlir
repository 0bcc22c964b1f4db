// etc-cpu-lower-quantized: the folded int8 ops (a torch.operator "etc_quantized.*" each after
// etc-cpu-edge-to-torch) and quantize/dequantize_per_tensor -> linalg on builtin tensors between
// torch_c casts; the weights' data from the constant table (here inline in the globals).
// RUN: etc-opt %s --split-input-file --pass-pipeline='builtin.module(etc-cpu-edge-to-torch, etc-cpu-lower-quantized)' | filecheck %s

// quantize_per_tensor: the portable kernel's float32 operations, elementwise.
// CHECK-LABEL: func.func @forward
// CHECK: %[[X:.*]] = torch_c.to_builtin_tensor %arg0
// CHECK: linalg.generic {{.*}} ins(%[[X]] : tensor<1x2x2x2xf32>) outs(%{{.*}} : tensor<1x2x2x2xi8>)
// CHECK: math.roundeven
// CHECK: arith.fptosi {{.*}} : f32 to i8
// A convolution (groups 1) is a qgemm: the filter as A, the image's im2col (marked with its
// geometry) as the unsigned B, the requantization after it; the correction (128 + zx) * sum w per
// filter comes from the weight's data: (128 + 21) * 18 * 3 = 8046.
// CHECK: torch_c.to_builtin_tensor %arg7 : !torch.vtensor<[3,2,3,3],si8> -> tensor<3x2x3x3xi8>
// CHECK: attrs = {etc.cpu.im2col = {dilation = array<i64: 1, 1>, stride = array<i64: 1, 1>}}
// CHECK: arith.xori
// CHECK: attrs = {etc.cpu.qgemm = {a_unsigned = false, kind = "convolution"}}
// CHECK: arith.constant dense<8046> : tensor<3xi32>
// The scaled sums are bounded inside i32 (K * 255 * 128 * max mult + max |bias| < 2^30): `fits_i32`.
// CHECK: attrs = {etc.cpu.requant = {fits_i32 = true, max = 127 : i64, min = -128 : i64, per = "row", zero_point = -128 : i64}}
// CHECK: torch_c.from_builtin_tensor {{.*}} -> !torch.vtensor<[1,3,2,2],si8>
// A depthwise convolution whose sums stay exact in float32: the f32 window op and the requantization.
// CHECK: linalg.depthwise_conv_2d_nchw_chw
// CHECK: math.roundeven
// The add: each side dequantized, added, requantized, in float32; marked with the same numbers
// (1 / 0.0037 as float32) for etc-cpu-int8-kernels to fuse it into a qgemm's epilogue.
// CHECK: attrs = {etc.cpu.qadd = {a_scale = 2.500000e-03 : f32, a_zero_point = -128 : i64, b_scale = 1.900000e-03 : f32, b_zero_point = -10 : i64, inverse = 270.270264 : f32, max = 127 : i64, min = -128 : i64, zero_point = -96 : i64}}
// CHECK: arith.addf
// CHECK: math.roundeven
// A linear layer is a qgemm with the activation rows unsigned as A, the weight as B:
// (128 - 96) * 12 = 384.
// CHECK: torch_c.to_builtin_tensor %arg9 : !torch.vtensor<[5,12],si8> -> tensor<5x12xi8>
// CHECK: attrs = {etc.cpu.qgemm = {a_unsigned = true, kind = "contraction"}}
// CHECK: arith.constant dense<384> : tensor<5xi32>
// CHECK: per = "col"
// dequantize_per_tensor.
// CHECK: arith.sitofp {{.*}} : i32 to f32
// CHECK-NOT: torch.operator
// CHECK: return

ml_program.global private @conv.bias(dense<[0.5, -0.25, 0.125]> : tensor<3xf32>) : tensor<3xf32>
ml_program.global private @dw.bias(dense<[0.0, 1.0, -1.0]> : tensor<3xf32>) : tensor<3xf32>
ml_program.global private @fc.bias(dense<[0.1, 0.2, 0.3, 0.4, 0.5]> : tensor<5xf32>) : tensor<5xf32>
ml_program.global private @conv.scales(dense<[0.01, 0.02, 0.03]> : tensor<3xf32>) : tensor<3xf32>
ml_program.global private @dw.scales(dense<[0.01, 0.01, 0.02]> : tensor<3xf32>) : tensor<3xf32>
ml_program.global private @fc.scales(dense<0.015> : tensor<5xf32>) : tensor<5xf32>
ml_program.global private @conv.weight(dense<3> : tensor<3x2x3x3xi8>) : tensor<3x2x3x3xi8>
ml_program.global private @dw.weight(dense<-2> : tensor<3x1x3x3xi8>) : tensor<3x1x3x3xi8>
ml_program.global private @fc.weight(dense<1> : tensor<5x12xi8>) : tensor<5x12xi8>
func.func @forward(%arg0: tensor<1x2x2x2xf32>) -> tensor<1x5xf32> {
  %conv.bias = ml_program.global_load_const @conv.bias : tensor<3xf32>
  %dw.bias = ml_program.global_load_const @dw.bias : tensor<3xf32>
  %fc.bias = ml_program.global_load_const @fc.bias : tensor<5xf32>
  %s0 = ml_program.global_load_const @conv.scales : tensor<3xf32>
  %s1 = ml_program.global_load_const @dw.scales : tensor<3xf32>
  %s2 = ml_program.global_load_const @fc.scales : tensor<5xf32>
  %w0 = ml_program.global_load_const @conv.weight : tensor<3x2x3x3xi8>
  %w1 = ml_program.global_load_const @dw.weight : tensor<3x1x3x3xi8>
  %w2 = ml_program.global_load_const @fc.weight : tensor<5x12xi8>
  %0 = "edge.quantized_decomposed_quantize_per_tensor"(%arg0) {dtype = i8, quant_max = 127 : i64, quant_min = -128 : i64, scale = 0.0146 : f64, zero_point = 21 : i64} : (tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xi8>
  %1 = "edge.etc_quantized_conv2d"(%0, %w0, %s0, %conv.bias) {dilation = array<i64: 1, 1>, groups = 1 : i64, input_scale = 0.0146 : f64, input_zero_point = 21 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1>, output_max = 127 : i64, output_min = -128 : i64, output_scale = 0.0025 : f64, output_zero_point = -128 : i64, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x2x2x2xi8>, tensor<3x2x3x3xi8>, tensor<3xf32>, tensor<3xf32>) -> tensor<1x3x2x2xi8>
  %2 = "edge.etc_quantized_conv2d"(%1, %w1, %s1, %dw.bias) {dilation = array<i64: 1, 1>, groups = 3 : i64, input_scale = 0.0025 : f64, input_zero_point = -128 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1>, output_max = 127 : i64, output_min = -128 : i64, output_scale = 0.0019 : f64, output_zero_point = -10 : i64, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x3x2x2xi8>, tensor<3x1x3x3xi8>, tensor<3xf32>, tensor<3xf32>) -> tensor<1x3x2x2xi8>
  %3 = "edge.etc_quantized_add"(%1, %2) {a_scale = 0.0025 : f64, a_zero_point = -128 : i64, b_scale = 0.0019 : f64, b_zero_point = -10 : i64, output_max = 127 : i64, output_min = -128 : i64, output_scale = 0.0037 : f64, output_zero_point = -96 : i64} : (tensor<1x3x2x2xi8>, tensor<1x3x2x2xi8>) -> tensor<1x3x2x2xi8>
  %4 = "edge.view"(%3) {operandSegmentSizes = array<i32: 1, 0>, size = array<i64: 1, 12>} : (tensor<1x3x2x2xi8>) -> tensor<1x12xi8>
  %5 = "edge.etc_quantized_linear"(%4, %w2, %s2, %fc.bias) {input_scale = 0.0037 : f64, input_zero_point = -96 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1>, output_max = 127 : i64, output_min = -128 : i64, output_scale = 0.0029 : f64, output_zero_point = 83 : i64} : (tensor<1x12xi8>, tensor<5x12xi8>, tensor<5xf32>, tensor<5xf32>) -> tensor<1x5xi8>
  %6 = "edge.quantized_decomposed_dequantize_per_tensor"(%5) {dtype = i8, out_dtype, quant_max = 127 : i64, quant_min = -128 : i64, scale = 0.0029 : f64, zero_point = 83 : i64} : (tensor<1x5xi8>) -> tensor<1x5xf32>
  return %6 : tensor<1x5xf32>
}

// -----

// 8da4w: the activation quantized per row, the int8 x int4 contraction on the weight's nibble
// pairs and its epilogue; the column sums C[n] are a constant argument the runtime derives at load
// (its recipe on the module), not stored.
// CHECK: module attributes {etc.cpu.derived = {"weight_int4#colsum" = {group_size = 8 : i64, op = "int4_colsum", scales = "scales", weight = "weight_int4"}}}
// CHECK-LABEL: func.func @forward
// CHECK-SAME: %[[C:[a-z0-9]+]]: !torch.vtensor<[4],f32> {bufferization.writable = false, etc.cpu.arg = "constant:weight_int4#colsum"}
// CHECK: %[[CB:.*]] = torch_c.to_builtin_tensor %[[C]]
// CHECK: attrs = {etc.cpu.qgemm_dynamic = {bits = 4 : i64, group_size = 8 : i64}}
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %{{.*}}, %{{.*}}, %[[CB]], %{{.*}} : {{.*}}) outs(%{{.*}}) attrs = {etc.cpu.qdequant}
// CHECK-NOT: torch.operator
ml_program.global private @weight_int4(dense<[[80, 152, 44, 112, 47, 238, 185, 13], [1, 2, 3, 4, 5, 6, 7, 8], [17, 34, 51, 68, 85, 102, 119, 136], [255, 0, 255, 0, 255, 0, 255, 0]]> : tensor<4x8xui8>) : tensor<4x8xui8>
ml_program.global private @bias(dense<[0.1, -0.2, 0.3, -0.4]> : tensor<4xf32>) : tensor<4xf32>
ml_program.global private @scales(dense<[[0.0275, 0.0318], [0.0277, 0.0309], [0.0312, 0.0311], [0.0331, 0.0258]]> : tensor<4x2xf32>) : tensor<4x2xf32>
func.func @forward(%arg0: tensor<2x16xf32>) -> tensor<2x4xf32> {
  %bias = ml_program.global_load_const @bias : tensor<4xf32>
  %w = ml_program.global_load_const @weight_int4 : tensor<4x8xui8>
  %s = ml_program.global_load_const @scales : tensor<4x2xf32>
  %0 = "edge.etc_quantized_linear_dynamic"(%arg0, %w, %s, %bias) {activation_eps = 0.000000e+00 : f64, activation_granularity = "per_row", group_size = 8 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 1>, weight_bits = 4 : i64} : (tensor<2x16xf32>, tensor<4x8xui8>, tensor<4x2xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

// A dynamic linear with int8 weights per channel and the activation quantized per tensor (PT2E's
// dynamic config): the range of the whole activation (both loops reduced) with its eps, the
// activation as [M, K/4, 4] (K = 6 padded to 8 with zeros), the weight's bytes as panels, and
// the column sums an inline constant (N floats: stored, no derivation).
// CHECK-NOT: etc.cpu.derived
// CHECK-LABEL: func.func @forward
// CHECK: iterator_types = ["reduction", "reduction"]} ins(%{{.*}} : tensor<3x6xf32>) outs(%{{.*}}, %{{.*}} : tensor<f32>, tensor<f32>)
// CHECK: arith.constant 1.1920929E-7 : f32
// CHECK: tensor.pad {{.*}} low[0, 0] high[0, 2]
// CHECK: outs(%{{.*}} : tensor<3x2x4xi8>)
// CHECK: attrs = {etc.cpu.qgemm_dynamic = {bits = 8 : i64, group_size = 6 : i64}}
// CHECK: ins(%{{.*}}, %{{.*}}, %{{.*}}, %cst{{.*}}, %cst{{.*}} : tensor<3x2xf32>, tensor<3xf32>, tensor<3xf32>, tensor<2xf32>, tensor<2xf32>) outs(%{{.*}}) attrs = {etc.cpu.qdequant}
// CHECK-NOT: torch.operator
ml_program.global private @weight_int8(dense<[[-127, 5, 64, -3, 100, 0], [1, -2, 3, -4, 5, 127]]> : tensor<2x6xi8>) : tensor<2x6xi8>
ml_program.global private @scales(dense<[[0.0275], [0.0318]]> : tensor<2x1xf32>) : tensor<2x1xf32>
func.func @forward(%arg0: tensor<3x6xf32>) -> tensor<3x2xf32> {
  %w = ml_program.global_load_const @weight_int8 : tensor<2x6xi8>
  %s = ml_program.global_load_const @scales : tensor<2x1xf32>
  %0 = "edge.etc_quantized_linear_dynamic"(%arg0, %w, %s) {activation_eps = 1.1920928955078125E-7 : f64, activation_granularity = "per_tensor", group_size = 6 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0>, weight_bits = 8 : i64} : (tensor<3x6xf32>, tensor<2x6xi8>, tensor<2x1xf32>) -> tensor<3x2xf32>
  return %0 : tensor<3x2xf32>
}

// -----

// A stride-1 convolution whose channels come by fours, with several taps and whole panels (here
// 4 channels, 3x3, a 4x4 output: P = 16): K runs tap by tap (k = (kh, kw, c)), so a group of K is
// 4 channels at one tap and etc-cpu-int8-kernels reads the panels in place from the image's
// channel-interleaved copies. The filter is transposed to that order (a layout chain of the
// weight, folded when the blob is built) and the gather is [KH, KW, C, OH, OW], marked taps_first.
// CHECK: #[[GATHER:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d2, d0 + d3, d1 + d4)>
// CHECK-LABEL: func.func @forward
// CHECK: linalg.transpose ins(%{{.*}} : tensor<2x4x3x3xi8>) outs(%{{.*}} : tensor<2x3x3x4xi8>) permutation = [0, 2, 3, 1]
// CHECK: tensor.collapse_shape %{{.*}} {{\[}}[0], [1, 2, 3]] : tensor<2x3x3x4xi8> into tensor<2x36xi8>
// CHECK: linalg.generic {indexing_maps = [#[[GATHER]], {{.*}} ins(%{{.*}} : tensor<4x6x6xi8>) outs(%{{.*}} : tensor<3x3x4x4x4xi8>) attrs =  {etc.cpu.im2col = {dilation = array<i64: 1, 1>, stride = array<i64: 1, 1>, taps_first}}
// CHECK: tensor.collapse_shape %{{.*}} {{\[}}[0, 1, 2], [3, 4]] : tensor<3x3x4x4x4xi8> into tensor<36x16xi8>
// CHECK: attrs = {etc.cpu.qgemm = {a_unsigned = false, kind = "convolution"}}
// The same layer with stride 2 keeps the weight's order (its panels would need a gather): no transpose.
// CHECK-NOT: linalg.transpose ins(%{{.*}} : tensor<2x4x3x3xi8>)
// CHECK: attrs = {etc.cpu.im2col = {dilation = array<i64: 1, 1>, stride = array<i64: 2, 2>}}

ml_program.global private @conv.bias(dense<[0.5, -0.25]> : tensor<2xf32>) : tensor<2xf32>
ml_program.global private @conv.scales(dense<[0.01, 0.02]> : tensor<2xf32>) : tensor<2xf32>
ml_program.global private @conv.weight(dense<3> : tensor<2x4x3x3xi8>) : tensor<2x4x3x3xi8>
func.func @forward(%arg0: tensor<1x4x4x4xi8>) -> (tensor<1x2x4x4xi8>, tensor<1x2x2x2xi8>) {
  %b = ml_program.global_load_const @conv.bias : tensor<2xf32>
  %s = ml_program.global_load_const @conv.scales : tensor<2xf32>
  %w = ml_program.global_load_const @conv.weight : tensor<2x4x3x3xi8>
  %0 = "edge.etc_quantized_conv2d"(%arg0, %w, %s, %b) {dilation = array<i64: 1, 1>, groups = 1 : i64, input_scale = 0.0146 : f64, input_zero_point = 21 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1>, output_max = 127 : i64, output_min = -128 : i64, output_scale = 0.0025 : f64, output_zero_point = -128 : i64, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x4x4x4xi8>, tensor<2x4x3x3xi8>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x4x4xi8>
  %1 = "edge.etc_quantized_conv2d"(%arg0, %w, %s, %b) {dilation = array<i64: 1, 1>, groups = 1 : i64, input_scale = 0.0146 : f64, input_zero_point = 21 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1>, output_max = 127 : i64, output_min = -128 : i64, output_scale = 0.0025 : f64, output_zero_point = -128 : i64, padding = array<i64: 1, 1>, stride = array<i64: 2, 2>} : (tensor<1x4x4x4xi8>, tensor<2x4x3x3xi8>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x2x2xi8>
  return %0, %1 : tensor<1x2x4x4xi8>, tensor<1x2x2x2xi8>
}
