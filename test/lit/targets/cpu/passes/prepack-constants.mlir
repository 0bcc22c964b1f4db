// RUN: etc-opt %s --etc-cpu-prepack-constants | filecheck %s

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
