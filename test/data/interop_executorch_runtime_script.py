"""A script written for executorch.runtime (its documented usage); the test runs it on etc by changing the import."""
import os
import sys
from pathlib import Path

import torch
from executorch.runtime import Runtime, Verification

pte_path, out_dir = Path(sys.argv[1]), Path(sys.argv[2])
et_runtime = Runtime.get()
program = et_runtime.load_program(pte_path, enable_etdump=True, debug_buffer_size=int(1e7))
print("Program methods:", program.method_names)
assert program.method_names == {"forward"}
with open(pte_path, "rb") as f:
    minimal = et_runtime.load_program(f.read(), verification=Verification.Minimal)
assert minimal.method_names == {"forward"}
assert minimal.load_method("forward").execute((torch.ones(2, 8), torch.zeros(2, 4)))[0].shape == (2, 4)
meta = program.metadata("forward")
assert meta.name() == "forward" and meta.num_inputs() == 2 and meta.num_outputs() == 1
info = meta.input_tensor_meta(0)
assert tuple(info.sizes()) == (2, 8) and info.dtype() == 6 and info.nbytes() == 2 * 8 * 4
assert info.is_memory_planned()
assert meta.output_tensor_meta(0).sizes() == (2, 4)
forward = program.load_method("forward")
assert forward.metadata.num_inputs() == 2
inputs = (torch.ones(2, 8), torch.full((2, 4), 0.5))
outputs = forward.execute(inputs)
print(f"  outputs: {outputs}")
assert len(outputs) == 1 and tuple(outputs[0].shape) == (2, 4)
etdump_file, debug_file = out_dir / "etdump_output.etdp", out_dir / "debug_output.bin"
program.write_etdump_result_to_file(str(etdump_file), str(debug_file))
print(f"ETDump file created: {os.path.exists(etdump_file)}")
assert os.path.exists(etdump_file)
operators = et_runtime.operator_registry.operator_names
assert "aten::addmm.out" in operators or "aten::mm.out" in operators
assert isinstance(et_runtime.backend_registry.registered_backend_names, list)
assert not et_runtime.backend_registry.is_available("NoSuchBackend")
print("RESULT", outputs[0].sum().item())
