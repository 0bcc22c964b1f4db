// RUN: etc-opt %s --split-input-file --etc-cpu-prepack-constants | filecheck %s

// The weight's transpose + pad feeding the matmul becomes a new constant argument whose pack
// function is the chain; the weight's own argument, unused now, is dropped. A chain on an input
// runs at call time.
// CHECK-LABEL: func.func @f
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<3x8xf32> {bufferization.writable = false, etc.cpu.arg = "input:0"},
// CHECK-SAME: %[[P:[a-z0-9]+]]: tensor<8x6xf32> {bufferization.writable = false, etc.cpu.arg = "constant:w#packed0", etc.cpu.pack = "func.func @pack(%arg0: tensor<4x8xf32>) -> tensor<8x6xf32> {
// CHECK-SAME: linalg.transpose
// CHECK-SAME: tensor.pad
// CHECK-NOT: tensor<4x8xf32>
// CHECK: linalg.matmul ins(%[[X]], %[[P]] : tensor<3x8xf32>, tensor<8x6xf32>)
// CHECK: linalg.transpose ins(%[[X]]
func.func @f(%x: tensor<3x8xf32> {etc.cpu.arg = "input:0", bufferization.writable = false},
             %w: tensor<4x8xf32> {etc.cpu.arg = "constant:w", bufferization.writable = false}) -> (tensor<3x6xf32>, tensor<8x3xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x4xf32>
  %t = linalg.transpose ins(%w : tensor<4x8xf32>) outs(%e : tensor<8x4xf32>) permutation = [1, 0]
  %p = tensor.pad %t low[0, 0] high[0, 2] {
  ^bb0(%i: index, %j: index):
    tensor.yield %zero : f32
  } : tensor<8x4xf32> to tensor<8x6xf32>
  %e2 = tensor.empty() : tensor<3x6xf32>
  %fill = linalg.fill ins(%zero : f32) outs(%e2 : tensor<3x6xf32>) -> tensor<3x6xf32>
  %mm = linalg.matmul ins(%x, %p : tensor<3x8xf32>, tensor<8x6xf32>) outs(%fill : tensor<3x6xf32>) -> tensor<3x6xf32>
  %e3 = tensor.empty() : tensor<8x3xf32>
  %xt = linalg.transpose ins(%x : tensor<3x8xf32>) outs(%e3 : tensor<8x3xf32>) permutation = [1, 0]
  return %mm, %xt : tensor<3x6xf32>, tensor<8x3xf32>
}

// -----

// An int8 filter widened to f32 for a float kernel (the int8 depthwise convolution): the reshape
// and the cast fold into one pack; a cast that narrows, does more than cast, or reads bf16 (no
// numpy type to evaluate it with) runs at call time.
// CHECK-LABEL: func.func @widen
// CHECK-SAME: etc.cpu.arg = "constant:dw#packed0", etc.cpu.pack = "func.func @pack(%arg0: tensor<4x1x3x3xi8>) -> tensor<4x3x3xf32> {
// CHECK-SAME: tensor.collapse_shape
// CHECK-SAME: arith.sitofp
// CHECK-NOT: etc.cpu.pack
// CHECK: arith.truncf
// CHECK: arith.sitofp
// CHECK: arith.addf
// CHECK: arith.extf %{{.*}} : bf16 to f32
func.func @widen(%w: tensor<4x1x3x3xi8> {etc.cpu.arg = "constant:dw", bufferization.writable = false},
                 %v: tensor<4xf32> {etc.cpu.arg = "constant:v", bufferization.writable = false},
                 %u: tensor<4xi8> {etc.cpu.arg = "constant:u", bufferization.writable = false},
                 %b: tensor<4xbf16> {etc.cpu.arg = "constant:b", bufferization.writable = false})
    -> (tensor<4x3x3xf32>, tensor<4xf16>, tensor<4xf32>, tensor<4xf32>) {
  %c = tensor.collapse_shape %w [[0, 1], [2], [3]] : tensor<4x1x3x3xi8> into tensor<4x3x3xi8>
  %e = tensor.empty() : tensor<4x3x3xf32>
  %f = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>],
                       iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%c : tensor<4x3x3xi8>) outs(%e : tensor<4x3x3xf32>) {
  ^bb0(%a: i8, %o: f32):
    %x = arith.sitofp %a : i8 to f32
    linalg.yield %x : f32
  } -> tensor<4x3x3xf32>
  %e2 = tensor.empty() : tensor<4xf16>
  %h = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%v : tensor<4xf32>) outs(%e2 : tensor<4xf16>) {
  ^bb0(%a: f32, %o: f16):
    %x = arith.truncf %a : f32 to f16
    linalg.yield %x : f16
  } -> tensor<4xf16>
  %e3 = tensor.empty() : tensor<4xf32>
  %g = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%u : tensor<4xi8>) outs(%e3 : tensor<4xf32>) {
  ^bb0(%a: i8, %o: f32):
    %x = arith.sitofp %a : i8 to f32
    %y = arith.addf %x, %x : f32
    linalg.yield %y : f32
  } -> tensor<4xf32>
  %e4 = tensor.empty() : tensor<4xf32>
  %bf = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%b : tensor<4xbf16>) outs(%e4 : tensor<4xf32>) {
  ^bb0(%a: bf16, %o: f32):
    %x = arith.extf %a : bf16 to f32
    linalg.yield %x : f32
  } -> tensor<4xf32>
  return %f, %h, %g, %bf : tensor<4x3x3xf32>, tensor<4xf16>, tensor<4xf32>, tensor<4xf32>
}
