// RUN: %PYTHON -m etc.tools.import_model transformer_encoder | filecheck %s
// Attention with a padding mask: layernorm, split + getitem, masked_fill, softmax, GELU.

// CHECK-LABEL: func.func @forward(%arg0: tensor<2x8x32xf32> {{.*}}, %arg1: tensor<2x8xi1>
// CHECK: "aten.layer_norm"
// CHECK: %[[QKV:.+]]:3 = "aten.split_tensor"
// CHECK: "aten.view"(%[[QKV]]#0
// CHECK: "aten.view"(%[[QKV]]#1
// CHECK: "aten.view"(%[[QKV]]#2
// CHECK: "aten.masked_fill_scalar"({{.*}} loc("masked_fill"("{{.*}}zoo.py":
// CHECK: "aten.softmax_int"
// CHECK: "aten.gelu"
