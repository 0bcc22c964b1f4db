// aten ops become the edge ops of the same name, attributes and locations kept;
// an op outside Core ATen is an error at the user's line (verify-diagnostics checks it).
// RUN: etc-opt %s --split-input-file --verify-diagnostics --etc-convert-aten-to-edge --mlir-print-debuginfo | filecheck %s

// CHECK-LABEL: func.func @forward
func.func @forward(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK: %[[A:.+]] = "edge.add_tensor"(%arg0, %arg0) {alpha = 1 : i64}
  // CHECK: "edge.relu"(%[[A]]) {{.*}}loc(#[[LOC:loc[0-9]*]])
  // CHECK-NOT: aten.
  %0 = "aten.add_tensor"(%x, %x) {alpha = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = "aten.relu"(%0) : (tensor<4x8xf32>) -> tensor<4x8xf32> loc("relu_1"("model.py":7:12))
  return %1 : tensor<4x8xf32>
}
// CHECK: #[[LOC]] = loc("relu_1"(#{{loc[0-9]*}}))

// -----

func.func @not_core(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @below {{'aten::dropout' is not in the Core ATen opset and has no decomposition to it}}
  %1 = "aten.dropout"(%x) {p = 0.5 : f64, train = false} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}

// -----

// A composite op torch decomposes (conv2d): the module was imported before to_edge's
// decompositions (tools/import_model without --decompose), and the error says that instead of
// "has no decomposition".
func.func @not_decomposed(%x: tensor<1x1x4x4xf32>, %w: tensor<1x1x1x1xf32>) -> tensor<1x1x4x4xf32> {
  // expected-error @below {{'aten::conv2d' is not in the Core ATen opset, so it has no edge form: etc.to_edge decomposes it (torch's decomposition table) before importing unless EdgeCompileConfig.preserve_ops keeps it, and a module imported without that step keeps it too; import the decomposed program (python -m etc.tools.import_model --decompose)}}
  %1 = "aten.conv2d"(%x, %w) {dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x1x4x4xf32>, tensor<1x1x1x1xf32>) -> tensor<1x1x4x4xf32>
  return %1 : tensor<1x1x4x4xf32>
}
