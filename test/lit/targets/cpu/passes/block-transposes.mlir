// RUN: etc-opt %s --split-input-file --etc-cpu-block-transposes | filecheck %s

// NHWC -> NCHW (ConvNeXt after a block): the input's contiguous dimension is the output's
// channel loop; the loops inside it (h, w: 196 lines a pass) are blocked: h by 1, w by 14
// (shorter than a tile), inside them the channel loop and the block. Both block loops carry
// etc.thread_split (blocks write disjoint parts of the output: a threaded entry may share either).
// CHECK-LABEL: func.func @nhwc_to_nchw
// CHECK: scf.for %{{.*}} = %{{.*}} to %c14 step %c1 iter_args
// CHECK: scf.for %{{.*}} = %{{.*}} to %c14{{.*}} step %c14
// CHECK: linalg.transpose ins(%{{.*}} : tensor<1x1x14x384xf32>) outs(%{{.*}} : tensor<1x384x1x14xf32>) permutation = [0, 3, 1, 2]
// CHECK: } {etc.thread_split}
// CHECK: } {etc.thread_split}
func.func @nhwc_to_nchw(%x: tensor<1x14x14x384xf32>) -> tensor<1x384x14x14xf32> {
  %e = tensor.empty() : tensor<1x384x14x14xf32>
  %t = linalg.transpose ins(%x : tensor<1x14x14x384xf32>) outs(%e : tensor<1x384x14x14xf32>) permutation = [0, 3, 1, 2]
  return %t : tensor<1x384x14x14xf32>
}

// -----

// A fused elementwise op reading one input transposed ([p, c] as [c, p]) and one in order: the
// innermost loop (3136 pixels) is blocked by 32, the channels inside.
// Unit dims do not count: the innermost loop longer than 1 is the one blocked.
// CHECK-LABEL: func.func @fused
// CHECK: scf.for %{{.*}} = %c0 to %c3136 step %c32
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : tensor<96x32x1xf32>, tensor<32x96xf32>)
#in_order = affine_map<(c, p, u) -> (c, p, u)>
#transposed = affine_map<(c, p, u) -> (p, c)>
func.func @fused(%a: tensor<96x3136x1xf32>, %b: tensor<3136x96xf32>) -> tensor<96x3136x1xf32> {
  %e = tensor.empty() : tensor<96x3136x1xf32>
  %r = linalg.generic {indexing_maps = [#in_order, #transposed, #in_order], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%a, %b : tensor<96x3136x1xf32>, tensor<3136x96xf32>) outs(%e : tensor<96x3136x1xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<96x3136x1xf32>
  return %r : tensor<96x3136x1xf32>
}

// -----

// Left as they are: a transpose whose inner loops touch few lines (NCHW -> NHWC over 48
// channels: 48 lines a pass), one that keeps the innermost dimension (attention's head split),
// and an elementwise op reading everything in order.
// CHECK-LABEL: func.func @left
// CHECK-NOT: scf.for
// CHECK: linalg.transpose
// CHECK: linalg.transpose
// CHECK: linalg.generic
// CHECK-NOT: scf.for
#id = affine_map<(i, j) -> (i, j)>
func.func @left(%x: tensor<1x48x56x56xf32>, %q: tensor<1x197x12x64xf32>, %a: tensor<64x64xf32>)
    -> (tensor<1x56x56x48xf32>, tensor<1x12x197x64xf32>, tensor<64x64xf32>) {
  %e = tensor.empty() : tensor<1x56x56x48xf32>
  %t = linalg.transpose ins(%x : tensor<1x48x56x56xf32>) outs(%e : tensor<1x56x56x48xf32>) permutation = [0, 2, 3, 1]
  %e2 = tensor.empty() : tensor<1x12x197x64xf32>
  %h = linalg.transpose ins(%q : tensor<1x197x12x64xf32>) outs(%e2 : tensor<1x12x197x64xf32>) permutation = [0, 2, 1, 3]
  %e3 = tensor.empty() : tensor<64x64xf32>
  %n = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a : tensor<64x64xf32>) outs(%e3 : tensor<64x64xf32>) {
  ^bb0(%x0: f32, %o: f32):
    %m = arith.mulf %x0, %x0 : f32
    linalg.yield %m : f32
  } -> tensor<64x64xf32>
  return %t, %h, %n : tensor<1x56x56x48xf32>, tensor<1x12x197x64xf32>, tensor<64x64xf32>
}
