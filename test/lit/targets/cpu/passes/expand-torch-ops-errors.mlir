// Expansions the cpu target computes from static sizes refuse a dynamically shaped tensor with
// an error (the partitioner's trial then leaves the op on portable kernels, with this reason),
// instead of multiplying the dynamic sentinel into a view (the compiler fuzzer found index_put
// computing garbage, or crashing an MLIR pass, that way).
// RUN: not etc-opt %s --pass-pipeline='builtin.module(etc-cpu-edge-to-torch, etc-cpu-expand-torch-ops)' 2>&1 | filecheck %s

// CHECK: error: as_strided of or to a dynamically shaped tensor (the cpu target takes static ones)
func.func @as_strided_dynamic(%x: tensor<?x12xf32> {etc.dim_bounds = array<i64: 1, 4, 12, 12>}) -> tensor<5x6xf32> {
  %r = "edge.as_strided"(%x) {operandSegmentSizes = array<i32: 1, 0, 0, 0>, size = array<i64: 5, 6>, storage_offset = 1 : i64, stride = array<i64: 2, 1>} : (tensor<?x12xf32>) -> tensor<5x6xf32>
  return %r : tensor<5x6xf32>
}
