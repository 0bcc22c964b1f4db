// RUN: etc-opt %s --split-input-file --verify-diagnostics --etc-cpu-profile-regions

// The pass needs the ABI etc-cpu-entry-abi records (it adds its buffer to it).
module {
  // expected-error@+1 {{etc-cpu-profile-regions: the module has no etc.cpu.abi (run after etc-cpu-entry-abi)}}
  func.func @f(%x: memref<8xf32>) {
    return
  }
}

// -----

// Its regions are loop nests: linalg ops not yet lowered are refused.
module attributes {etc.cpu.abi = [], etc.cpu.scratch_bytes = 0 : i64} {
  // expected-error@+1 {{etc-cpu-profile-regions: the entry still has linalg ops (run after the loops are lowered)}}
  func.func @g(%x: memref<8xf32>) {
    %z = arith.constant 0.0 : f32
    linalg.fill ins(%z : f32) outs(%x : memref<8xf32>)
    return
  }
}

