// The object's entry: `void etc_cpu_entry(ptr args)` loading one data pointer per
// buffer, vectorized by LLVM for the target, with libc/libm as the only externals;
// 32-bit index math on Cortex-M.
// RUN: %PYTHON -m etc.targets.cpu.pipeline --target x86-64-v3 --run %s --emit llvm-ir | filecheck %s
// RUN: %PYTHON -m etc.targets.cpu.pipeline --target cortex-m7 --run %s --emit llvm-ir | filecheck %s --check-prefix=M7

// CHECK: // target: x86_64-unknown-linux-gnu (haswell)
// CHECK: // entry etc_cpu_entry(args): input:float32[4, 16], output:float32[4, 16]
// CHECK: target triple = "x86_64-unknown-linux-gnu"
// The loop nest is a function of its own (etc-cpu-outline-regions), its buffers noalias as the
// entry's: vectorized with no run-time overlap check.
// CHECK: define internal fastcc void @delegate_cpu_0_region0(ptr noalias
// CHECK-NOT: memcheck
// CHECK: fmul <8 x float>
// CHECK: define void @etc_cpu_entry(ptr
// CHECK: call fastcc void @delegate_cpu_0_region0(
// exp is expanded into vectorizable arithmetic (etc-cpu-expand-math), not one expf call per element.
// CHECK: // entry etc_cpu_entry(args): input:float32[4, 16], output:float32[4, 16]
// CHECK-NOT: @expf
// CHECK: @llvm.roundeven.v8f32
// CHECK-NOT: @expf
// CHECK-NOT: declare {{.*}}@malloc
// M7: // target: thumbv7em-unknown-none-eabihf (cortex-m7)
// M7: target triple = "thumbv7em-unknown-none-eabihf"
// M7: define {{.*}}void @etc_cpu_entry(ptr
// M7-NOT: i64
// M7: ret void
func.func private @delegate_cpu_0(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %m = "edge.mul_tensor"(%x, %x) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %r = "edge.add_tensor"(%m, %x) {alpha = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  return %r : tensor<4x16xf32>
}

func.func private @delegate_cpu_1(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %e = "edge.exp"(%x) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  return %e : tensor<4x16xf32>
}
