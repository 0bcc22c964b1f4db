// A dynamic dimension without an upper bound cannot be planned; the error names the op's line.
// RUN: not etc-opt %s --etc-memory-planning 2>&1 | filecheck %s
// RUN: not etc-opt %s --etc-memory-planning=algorithm=best 2>&1 | filecheck %s --check-prefix=ALGO

func.func @forward(%x: tensor<?x8xf32> {etc.dim_bounds = array<i64: 1, 4, 8, 8>}) -> tensor<?x8xf32> {
  // CHECK: memory-planning-errors.mlir:7:8: error: dimension 0 of a tensor<?x8xf32> value in method 'forward' has no upper bound
  %0 = "edge.relu"(%x) : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}
// ALGO: unknown memory planning algorithm 'best'
