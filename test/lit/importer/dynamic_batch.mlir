// RUN: %PYTHON -m etc.tools.import_model dynamic_batch | filecheck %s
// RUN: %PYTHON -m etc.tools.import_model mlp --dynamic-batch 2:16 | filecheck %s --check-prefix=FLAG
// A torch.export.Dim becomes `?`, its range an `etc.dim_bounds` argument attribute.

// CHECK: func.func @forward(%arg0: tensor<?x16xf32> {etc.dim_bounds = array<i64: 1, 32, 16, 16>} loc("x")) -> tensor<?x4xf32>
// CHECK: "aten.linear"(%arg0, {{.*}}) {{.*}}: (tensor<?x16xf32>, tensor<32x16xf32>, tensor<32xf32>) -> tensor<?x32xf32>

// FLAG: func.func @forward(%arg0: tensor<?x32xf32> {etc.dim_bounds = array<i64: 2, 16, 32, 32>}
