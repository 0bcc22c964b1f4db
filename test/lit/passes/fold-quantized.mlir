// RUN: etc-opt %s --split-input-file --etc-fold-quantized | filecheck %s
// dq -> op -> q computations become one quantized op carrying its scales and zero points.

// Static conv + relu: the relu is the output range [zero point, 127]; the int8 weight and its
// per-channel scales are the program's own constants (not requantized).
ml_program.global private @w(dense<[[[[-31]]], [[[127]]]]> : tensor<2x1x1x1xi8>) : tensor<2x1x1x1xi8>
ml_program.global private @s(dense<[0.25, 0.5]> : tensor<2xf32>) : tensor<2xf32>
ml_program.global private @z(dense<0> : tensor<2xi64>) : tensor<2xi64>
ml_program.global private @b(dense<[-0.8, 0.7]> : tensor<2xf32>) : tensor<2xf32>
// CHECK-LABEL: func.func @conv_relu
func.func @conv_relu(%arg0: tensor<1x1x2x2xi8>) -> tensor<1x2x2x2xi8> {
  %w = ml_program.global_load_const @w : tensor<2x1x1x1xi8>
  %s = ml_program.global_load_const @s : tensor<2xf32>
  %z = ml_program.global_load_const @z : tensor<2xi64>
  %b = ml_program.global_load_const @b : tensor<2xf32>
  %0 = "edge.quantized_decomposed_dequantize_per_channel"(%w, %s, %z) {axis = 0 : i64, dtype = i8, operandSegmentSizes = array<i32: 1, 1, 1>, out_dtype, quant_max = 127 : i64, quant_min = -127 : i64} : (tensor<2x1x1x1xi8>, tensor<2xf32>, tensor<2xi64>) -> tensor<2x1x1x1xf32>
  %1 = "edge.quantized_decomposed_dequantize_per_tensor"(%arg0) {dtype = i8, out_dtype, quant_max = 127 : i64, quant_min = -128 : i64, scale = 0.015 : f64, zero_point = 21 : i64} : (tensor<1x1x2x2xi8>) -> tensor<1x1x2x2xf32>
  %2 = "edge.convolution"(%1, %0, %b) {dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0>, output_padding = array<i64: 0, 0>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>, transposed = false} : (tensor<1x1x2x2xf32>, tensor<2x1x1x1xf32>, tensor<2xf32>) -> tensor<1x2x2x2xf32>
  %3 = "edge.relu"(%2) : (tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  %4 = "edge.quantized_decomposed_quantize_per_tensor"(%3) {dtype = i8, quant_max = 127 : i64, quant_min = -128 : i64, scale = 0.01 : f64, zero_point = -100 : i64} : (tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xi8>
  // CHECK-NOT: dequantize
  // CHECK: %[[W:.+]] = ml_program.global_load_const @w
  // CHECK: %[[S:.+]] = ml_program.global_load_const @s
  // CHECK: %[[B:.+]] = ml_program.global_load_const @b
  // CHECK: "edge.etc_quantized_conv2d"(%arg0, %[[W]], %[[S]], %[[B]])
  // CHECK-SAME: groups = 1 : i64, input_scale = 1.500000e-02 : f64, input_zero_point = 21 : i64
  // CHECK-SAME: output_max = 127 : i64, output_min = -100 : i64, output_scale = 1.000000e-02 : f64, output_zero_point = -100 : i64
  // CHECK-NOT: edge.relu
  // CHECK-NOT: quantize_per_tensor
  return %4 : tensor<1x2x2x2xi8>
}

// -----

// Static linear (addmm of the transposed dequantized weight) + hardtanh(-1, 1): the range is
// [round(-1 / 0.01) - 70, round(1 / 0.01) - 70] = [-170 -> -128, 30].
ml_program.global private @w(dense<[[-127, 88], [-3, 127]]> : tensor<2x2xi8>) : tensor<2x2xi8>
ml_program.global private @s(dense<[0.002, 0.004]> : tensor<2xf32>) : tensor<2xf32>
ml_program.global private @z(dense<0> : tensor<2xi64>) : tensor<2xi64>
ml_program.global private @b(dense<[-0.06, 0.18]> : tensor<2xf32>) : tensor<2xf32>
// CHECK-LABEL: func.func @linear_hardtanh
func.func @linear_hardtanh(%arg0: tensor<1x2xi8>) -> tensor<1x2xi8> {
  %w = ml_program.global_load_const @w : tensor<2x2xi8>
  %s = ml_program.global_load_const @s : tensor<2xf32>
  %z = ml_program.global_load_const @z : tensor<2xi64>
  %b = ml_program.global_load_const @b : tensor<2xf32>
  %0 = "edge.quantized_decomposed_dequantize_per_channel"(%w, %s, %z) {axis = 0 : i64, dtype = i8, operandSegmentSizes = array<i32: 1, 1, 1>, out_dtype, quant_max = 127 : i64, quant_min = -127 : i64} : (tensor<2x2xi8>, tensor<2xf32>, tensor<2xi64>) -> tensor<2x2xf32>
  %1 = "edge.quantized_decomposed_dequantize_per_tensor"(%arg0) {dtype = i8, out_dtype, quant_max = 127 : i64, quant_min = -128 : i64, scale = 7.0e-4 : f64, zero_point = -128 : i64} : (tensor<1x2xi8>) -> tensor<1x2xf32>
  %2 = "edge.permute"(%0) {dims = array<i64: 1, 0>} : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %3 = "edge.addmm"(%b, %1, %2) {alpha = 1 : i64, beta = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0>} : (tensor<2xf32>, tensor<1x2xf32>, tensor<2x2xf32>) -> tensor<1x2xf32>
  %4 = "edge.hardtanh"(%3) {max_val = 1.000000e+00 : f64, min_val = -1.000000e+00 : f64, operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<1x2xf32>) -> tensor<1x2xf32>
  %5 = "edge.quantized_decomposed_quantize_per_tensor"(%4) {dtype = i8, quant_max = 127 : i64, quant_min = -128 : i64, scale = 0.01 : f64, zero_point = -70 : i64} : (tensor<1x2xf32>) -> tensor<1x2xi8>
  // CHECK: "edge.etc_quantized_linear"(%arg0, %w, %s, %b)
  // CHECK-SAME: output_max = 30 : i64, output_min = -128 : i64
  // CHECK-NOT: edge.permute
  // CHECK-NOT: edge.addmm
  return %5 : tensor<1x2xi8>
}

// -----

// Static add of two int8 tensors.
// CHECK-LABEL: func.func @add
func.func @add(%a: tensor<4xi8>, %b: tensor<4xi8>) -> tensor<4xi8> {
  %0 = "edge.quantized_decomposed_dequantize_per_tensor"(%a) {dtype = i8, out_dtype, quant_max = 127 : i64, quant_min = -128 : i64, scale = 0.5 : f64, zero_point = 1 : i64} : (tensor<4xi8>) -> tensor<4xf32>
  %1 = "edge.quantized_decomposed_dequantize_per_tensor"(%b) {dtype = i8, out_dtype, quant_max = 127 : i64, quant_min = -128 : i64, scale = 0.25 : f64, zero_point = -2 : i64} : (tensor<4xi8>) -> tensor<4xf32>
  %2 = "edge.add_tensor"(%0, %1) {alpha = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %3 = "edge.quantized_decomposed_quantize_per_tensor"(%2) {dtype = i8, quant_max = 127 : i64, quant_min = -128 : i64, scale = 1.0 : f64, zero_point = 0 : i64} : (tensor<4xf32>) -> tensor<4xi8>
  // CHECK: "edge.etc_quantized_add"(%arg0, %arg1) {a_scale = 5.000000e-01 : f64, a_zero_point = 1 : i64, b_scale = 2.500000e-01 : f64, b_zero_point = -2 : i64, output_max = 127 : i64, output_min = -128 : i64, output_scale = 1.000000e+00 : f64, output_zero_point = 0 : i64}
  // CHECK-NEXT: return
  return %3 : tensor<4xi8>
}

// -----

// torchao's 8da4w linear (dynamic per-row int8 activations, int4 weights in groups of 2): the
// weight is packed two per byte at compile time, element 2j in the low nibble:
// [-8, 7, 1, -1] -> [0x78 = 120, 0xF1 = 241]; [3, -2, 0, 5] -> [0xE3 = 227, 0x50 = 80].
ml_program.global private @wq(dense<[[-8, 7, 1, -1], [3, -2, 0, 5]]> : tensor<2x4xi8>) : tensor<2x4xi8>
ml_program.global private @ws(dense<[[0.1, 0.2], [0.3, 0.4]]> : tensor<2x2xf32>) : tensor<2x2xf32>
ml_program.global private @wz(dense<0> : tensor<2x2xi8>) : tensor<2x2xi8>
// CHECK: ml_program.global private @weight_int4(dense<{{\[}}[120, 241], [227, 80]]> : tensor<2x2xui8>)
// CHECK-NOT: @wq
// CHECK-LABEL: func.func @dynamic_int4
func.func @dynamic_int4(%x: tensor<3x4xf32>) -> tensor<3x2xf32> {
  %wq = ml_program.global_load_const @wq : tensor<2x4xi8>
  %ws = ml_program.global_load_const @ws : tensor<2x2xf32>
  %wz = ml_program.global_load_const @wz : tensor<2x2xi8>
  %p:2 = "edge.torchao_choose_qparams_affine"(%x) {block_size = array<i64: 1, 4>, eps, keepdim = false, mapping_type = "ASYMMETRIC", operandSegmentSizes = array<i32: 1, 0, 0, 0>, quant_max = 127 : i64, quant_min = -128 : i64, scale_dtype, target_dtype = i8, zero_point_dtype = i8} : (tensor<3x4xf32>) -> (tensor<3xf32>, tensor<3xi8>)
  %q = "edge.torchao_quantize_affine"(%x, %p#0, %p#1) {block_size = array<i64: 1, 4>, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0>, output_dtype = i8, quant_max = 127 : i64, quant_min = -128 : i64} : (tensor<3x4xf32>, tensor<3xf32>, tensor<3xi8>) -> tensor<3x4xi8>
  %dq = "edge.torchao_dequantize_affine"(%q, %p#0, %p#1) {block_size = array<i64: 1, 4>, input_dtype = i8, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0>, output_dtype = f32, quant_max = 127 : i64, quant_min = -128 : i64} : (tensor<3x4xi8>, tensor<3xf32>, tensor<3xi8>) -> tensor<3x4xf32>
  %w = "edge.torchao_dequantize_affine"(%wq, %ws, %wz) {block_size = array<i64: 1, 2>, input_dtype = i8, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0>, output_dtype = f32, quant_max = 7 : i64, quant_min = -8 : i64} : (tensor<2x4xi8>, tensor<2x2xf32>, tensor<2x2xi8>) -> tensor<2x4xf32>
  %wt = "edge.permute"(%w) {dims = array<i64: 1, 0>} : (tensor<2x4xf32>) -> tensor<4x2xf32>
  %y = "edge.mm"(%dq, %wt) : (tensor<3x4xf32>, tensor<4x2xf32>) -> tensor<3x2xf32>
  // CHECK: %[[W:.+]] = ml_program.global_load_const @weight_int4
  // CHECK: "edge.etc_quantized_linear_dynamic"(%arg0, %[[W]], %{{[^)]+}})
  // CHECK-SAME: activation_granularity = "per_row"
  // CHECK-SAME: group_size = 2 : i64
  // CHECK-SAME: weight_bits = 4 : i64
  // CHECK-NOT: torchao
  return %y : tensor<3x2xf32>
}

// -----

// A weight with non-zero zero points is not symmetric: nothing is folded.
ml_program.global private @w(dense<1> : tensor<2x1x1x1xi8>) : tensor<2x1x1x1xi8>
ml_program.global private @s(dense<0.5> : tensor<2xf32>) : tensor<2xf32>
ml_program.global private @z(dense<3> : tensor<2xi64>) : tensor<2xi64>
// CHECK-LABEL: func.func @asymmetric_weight
func.func @asymmetric_weight(%arg0: tensor<1x1x2x2xi8>) -> tensor<1x2x2x2xi8> {
  %w = ml_program.global_load_const @w : tensor<2x1x1x1xi8>
  %s = ml_program.global_load_const @s : tensor<2xf32>
  %z = ml_program.global_load_const @z : tensor<2xi64>
  %0 = "edge.quantized_decomposed_dequantize_per_channel"(%w, %s, %z) {axis = 0 : i64, dtype = i8, operandSegmentSizes = array<i32: 1, 1, 1>, out_dtype, quant_max = 127 : i64, quant_min = -127 : i64} : (tensor<2x1x1x1xi8>, tensor<2xf32>, tensor<2xi64>) -> tensor<2x1x1x1xf32>
  %1 = "edge.quantized_decomposed_dequantize_per_tensor"(%arg0) {dtype = i8, out_dtype, quant_max = 127 : i64, quant_min = -128 : i64, scale = 0.015 : f64, zero_point = 21 : i64} : (tensor<1x1x2x2xi8>) -> tensor<1x1x2x2xf32>
  %2 = "edge.convolution"(%1, %0) {dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>, output_padding = array<i64: 0, 0>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>, transposed = false} : (tensor<1x1x2x2xf32>, tensor<2x1x1x1xf32>) -> tensor<1x2x2x2xf32>
  %3 = "edge.quantized_decomposed_quantize_per_tensor"(%2) {dtype = i8, quant_max = 127 : i64, quant_min = -128 : i64, scale = 0.01 : f64, zero_point = -100 : i64} : (tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xi8>
  // CHECK: edge.convolution
  // CHECK-NOT: etc_quantized
  return %3 : tensor<1x2x2x2xi8>
}

// -----

// An op that keeps its input's scale (same parameters on both sides) runs on the int8 values.
// CHECK-LABEL: func.func @same_scale
func.func @same_scale(%arg0: tensor<1x2x4x4xi8>) -> (tensor<1x8xi8>, tensor<1x8xi8>) {
  %0 = "edge.quantized_decomposed_dequantize_per_tensor"(%arg0) {dtype = i8, out_dtype, quant_max = 127 : i64, quant_min = -128 : i64, scale = 0.5 : f64, zero_point = 3 : i64} : (tensor<1x2x4x4xi8>) -> tensor<1x2x4x4xf32>
  %1:2 = "edge.max_pool2d_with_indices"(%0) {ceil_mode = false, dilation = array<i64: 1, 1>, kernel_size = array<i64: 2, 2>, padding = array<i64: 0, 0>, stride = array<i64: 2, 2>} : (tensor<1x2x4x4xf32>) -> (tensor<1x2x2x2xf32>, tensor<1x2x2x2xi64>)
  %2 = "edge.quantized_decomposed_quantize_per_tensor"(%1#0) {dtype = i8, quant_max = 127 : i64, quant_min = -128 : i64, scale = 0.5 : f64, zero_point = 3 : i64} : (tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xi8>
  %3 = "edge.quantized_decomposed_dequantize_per_tensor"(%2) {dtype = i8, out_dtype, quant_max = 127 : i64, quant_min = -128 : i64, scale = 0.5 : f64, zero_point = 3 : i64} : (tensor<1x2x2x2xi8>) -> tensor<1x2x2x2xf32>
  %4 = "edge.view"(%3) {operandSegmentSizes = array<i32: 1, 0>, size = array<i64: 1, 8>} : (tensor<1x2x2x2xf32>) -> tensor<1x8xf32>
  %5 = "edge.quantized_decomposed_quantize_per_tensor"(%4) {dtype = i8, quant_max = 127 : i64, quant_min = -128 : i64, scale = 0.5 : f64, zero_point = 3 : i64} : (tensor<1x8xf32>) -> tensor<1x8xi8>
  // Another scale on the output: a requantization, left as it is.
  %6 = "edge.view"(%3) {operandSegmentSizes = array<i32: 1, 0>, size = array<i64: 1, 8>} : (tensor<1x2x2x2xf32>) -> tensor<1x8xf32>
  %7 = "edge.quantized_decomposed_quantize_per_tensor"(%6) {dtype = i8, quant_max = 127 : i64, quant_min = -128 : i64, scale = 0.25 : f64, zero_point = 3 : i64} : (tensor<1x8xf32>) -> tensor<1x8xi8>
  // CHECK: %[[POOL:.+]]:2 = "edge.max_pool2d_with_indices"(%arg0) {{.*}} : (tensor<1x2x4x4xi8>) -> (tensor<1x2x2x2xi8>, tensor<1x2x2x2xi64>)
  // CHECK: %[[DQ:.+]] = "edge.quantized_decomposed_dequantize_per_tensor"(%[[POOL]]#0)
  // CHECK: %[[VIEW:.+]] = "edge.view"(%[[POOL]]#0) {{.*}} : (tensor<1x2x2x2xi8>) -> tensor<1x8xi8>
  // CHECK: %[[F:.+]] = "edge.view"(%[[DQ]]) {{.*}} -> tensor<1x8xf32>
  // CHECK: %[[Q:.+]] = "edge.quantized_decomposed_quantize_per_tensor"(%[[F]]) {{.*}}scale = 2.500000e-01
  // CHECK: return %[[VIEW]], %[[Q]]
  return %5, %7 : tensor<1x8xi8>, tensor<1x8xi8>
}

// -----

// Zero padding keeps its input's scale: on int8 it fills with the zero point; another value would
// need a fill the scale may not hold, so it stays a float round trip.
// CHECK-LABEL: func.func @zero_pad
func.func @zero_pad(%arg0: tensor<1x2x4x4xi8>) -> (tensor<1x2x5x5xi8>, tensor<1x2x5x5xi8>) {
  %0 = "edge.quantized_decomposed_dequantize_per_tensor"(%arg0) {dtype = i8, out_dtype, quant_max = 127 : i64, quant_min = -128 : i64, scale = 0.5 : f64, zero_point = -128 : i64} : (tensor<1x2x4x4xi8>) -> tensor<1x2x4x4xf32>
  %1 = "edge.constant_pad_nd"(%0) {operandSegmentSizes = array<i32: 1, 0, 0>, pad = array<i64: 0, 1, 0, 1>, value = 0.000000e+00 : f64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x5x5xf32>
  %2 = "edge.quantized_decomposed_quantize_per_tensor"(%1) {dtype = i8, quant_max = 127 : i64, quant_min = -128 : i64, scale = 0.5 : f64, zero_point = -128 : i64} : (tensor<1x2x5x5xf32>) -> tensor<1x2x5x5xi8>
  %3 = "edge.constant_pad_nd"(%0) {operandSegmentSizes = array<i32: 1, 0, 0>, pad = array<i64: 0, 1, 0, 1>, value = 1.000000e+00 : f64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x5x5xf32>
  %4 = "edge.quantized_decomposed_quantize_per_tensor"(%3) {dtype = i8, quant_max = 127 : i64, quant_min = -128 : i64, scale = 0.5 : f64, zero_point = -128 : i64} : (tensor<1x2x5x5xf32>) -> tensor<1x2x5x5xi8>
  // CHECK: %[[DQ:.+]] = "edge.quantized_decomposed_dequantize_per_tensor"(%arg0)
  // CHECK: %[[PAD:.+]] = "edge.constant_pad_nd"(%arg0) {{.*}}value = -1.280000e+02 : f64} : (tensor<1x2x4x4xi8>) -> tensor<1x2x5x5xi8>
  // CHECK: %[[F:.+]] = "edge.constant_pad_nd"(%[[DQ]]) {{.*}}value = 1.000000e+00 : f64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x5x5xf32>
  // CHECK: %[[Q:.+]] = "edge.quantized_decomposed_quantize_per_tensor"(%[[F]])
  // CHECK: return %[[PAD]], %[[Q]]
  return %2, %4 : tensor<1x2x5x5xi8>, tensor<1x2x5x5xi8>
}

// -----

// A static linear on [1, T, K] (view -> addmm -> view): both views keep rows, so they move onto
// the int8 values and the linear between them is folded.
ml_program.global private @w(dense<[[-127, 88], [-3, 127]]> : tensor<2x2xi8>) : tensor<2x2xi8>
ml_program.global private @s(dense<[0.002, 0.004]> : tensor<2xf32>) : tensor<2xf32>
ml_program.global private @z(dense<0> : tensor<2xi64>) : tensor<2xi64>
ml_program.global private @b(dense<[-0.06, 0.18]> : tensor<2xf32>) : tensor<2xf32>
// CHECK-LABEL: func.func @linear_3d
func.func @linear_3d(%arg0: tensor<1x3x2xi8>) -> tensor<1x3x2xi8> {
  %w = ml_program.global_load_const @w : tensor<2x2xi8>
  %s = ml_program.global_load_const @s : tensor<2xf32>
  %z = ml_program.global_load_const @z : tensor<2xi64>
  %b = ml_program.global_load_const @b : tensor<2xf32>
  %0 = "edge.quantized_decomposed_dequantize_per_channel"(%w, %s, %z) {axis = 0 : i64, dtype = i8, operandSegmentSizes = array<i32: 1, 1, 1>, out_dtype, quant_max = 127 : i64, quant_min = -127 : i64} : (tensor<2x2xi8>, tensor<2xf32>, tensor<2xi64>) -> tensor<2x2xf32>
  %1 = "edge.quantized_decomposed_dequantize_per_tensor"(%arg0) {dtype = i8, out_dtype, quant_max = 127 : i64, quant_min = -128 : i64, scale = 7.0e-4 : f64, zero_point = -128 : i64} : (tensor<1x3x2xi8>) -> tensor<1x3x2xf32>
  %2 = "edge.view"(%1) {operandSegmentSizes = array<i32: 1, 0>, size = array<i64: 3, 2>} : (tensor<1x3x2xf32>) -> tensor<3x2xf32>
  %3 = "edge.permute"(%0) {dims = array<i64: 1, 0>} : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %4 = "edge.addmm"(%b, %2, %3) {alpha = 1 : i64, beta = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0>} : (tensor<2xf32>, tensor<3x2xf32>, tensor<2x2xf32>) -> tensor<3x2xf32>
  %5 = "edge.view"(%4) {operandSegmentSizes = array<i32: 1, 0>, size = array<i64: 1, 3, 2>} : (tensor<3x2xf32>) -> tensor<1x3x2xf32>
  %6 = "edge.quantized_decomposed_quantize_per_tensor"(%5) {dtype = i8, quant_max = 127 : i64, quant_min = -128 : i64, scale = 0.01 : f64, zero_point = -70 : i64} : (tensor<1x3x2xf32>) -> tensor<1x3x2xi8>
  // CHECK: %[[IN:.+]] = "edge.view"(%arg0) {{.*}} : (tensor<1x3x2xi8>) -> tensor<3x2xi8>
  // CHECK: %[[L:.+]] = "edge.etc_quantized_linear"(%[[IN]], %w, %s, %b) {{.*}} -> tensor<3x2xi8>
  // CHECK: %[[OUT:.+]] = "edge.view"(%[[L]]) {{.*}} : (tensor<3x2xi8>) -> tensor<1x3x2xi8>
  // CHECK-NEXT: return %[[OUT]]
  return %6 : tensor<1x3x2xi8>
}
