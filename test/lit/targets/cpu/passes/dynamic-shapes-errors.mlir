// RUN: not etc-opt %s --etc-cpu-dynamic-shapes 2>&1 | filecheck %s

// A dynamic dim needs its bounds: the cpu target compiles for the upper bound.
// CHECK: input 0 (memref<?x4xf32>) has no `etc.dim_bounds`
func.func @unbounded(%x: memref<?x4xf32> {etc.cpu.arg = "input:0"}) {
  return
}
