// RUN: %PYTHON -m etc.tools.import_model mobilenet_v2 | filecheck %s
// Batch norm statistics are read-only buffers; the depthwise conv keeps its groups.

// CHECK: ml_program.global private @stem.1.running_mean(#ml_program.extern : tensor<16xf32>)
// CHECK: ml_program.global private @stem.1.num_batches_tracked(#ml_program.extern : tensor<i64>)
// CHECK-LABEL: func.func @forward(%arg0: tensor<1x3x32x32xf32>
// CHECK: "aten.conv2d"({{.*}}) {{.*}}groups = 1 : i64{{.*}} loc("conv2d"("{{.*}}zoo.py":
// CHECK: "aten.batch_norm"({{.*}} loc("batch_norm"("{{.*}}zoo.py":
// CHECK: "aten.hardtanh"
// CHECK: "aten.conv2d"({{.*}}) {{.*}}groups = 16 : i64
// CHECK: "aten.mean_dim"
