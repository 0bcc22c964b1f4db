"""The memory planning pass on MLIR functions written as text.

The functions use generic op syntax in a context that allows unregistered
dialects: the pass reads only op names, operands, results and attributes, so it
must not depend on the dialect classes.
"""

import pytest
from torch_mlir import ir

from etc.errors import MemoryPlanningError
from etc.passes.memory_planning import options_from_strings, plan_memory, run_memory_planning_pass


def parse(text: str) -> ir.Module:
    context = ir.Context()
    context.allow_unregistered_dialects = True
    with context:
        return ir.Module.parse(text)


def func_named(module, name="forward"):
    for op in module.body.operations:
        if op.operation.name == "func.func" and ir.StringAttr(op.operation.attributes["sym_name"]).value == name:
            return op.operation
    raise KeyError(name)


def ops_of(module, name="forward"):
    return [op.operation for op in func_named(module, name).regions[0].blocks[0].operations]


def allocs(op):
    """`etc.alloc` of an op as a list of (mem_id, offset, nbytes) or None per result."""
    with op.context:
        return [None if isinstance(a, ir.UnitAttr) else tuple(int(x) for x in ir.DenseI64ArrayAttr(a))
                for a in ir.ArrayAttr(op.attributes["etc.alloc"])]


def func_ints(module, attr, name="forward"):
    with module.context:
        return [int(x) for x in ir.DenseI64ArrayAttr(func_named(module, name).attributes[attr])]


def arg_alloc(module, index, name="forward"):
    with module.context:
        func = func_named(module, name)
        if "arg_attrs" not in func.attributes:
            return None
        d = ir.DictAttr(ir.ArrayAttr(func.attributes["arg_attrs"])[index])
        return tuple(int(x) for x in ir.DenseI64ArrayAttr(d["etc.alloc"])) if "etc.alloc" in d else None


def assert_no_collisions(report):
    """Two placed values live at a common step must not share bytes, unless one aliases the other."""
    for plan in report.methods.values():
        placed = plan.placements
        for i, (a, mem_a, off_a) in enumerate(placed):
            for b, mem_b, off_b in placed[i + 1:]:
                same_storage = (mem_a, off_a) == (mem_b, off_b) and a.start <= b.end and b.start <= a.end
                if mem_a != mem_b or same_storage or a.end < b.start or b.end < a.start:
                    continue
                assert off_a + a.nbytes <= off_b or off_b + b.nbytes <= off_a, (a, b)


T = "tensor<4x8xf32>"  # 128 bytes

CHAIN = f"""
func.func @forward(%x: {T}) -> {T} {{
  %0 = "edge.relu"(%x) : ({T}) -> {T}
  %1 = "edge.sigmoid"(%0) : ({T}) -> {T}
  %2 = "edge.tanh"(%1) : ({T}) -> {T}
  %3 = "edge.relu"(%2) : ({T}) -> {T}
  return %3 : {T}
}}
"""


def test_chain_is_planned_at_its_lower_bound():
    module = parse(CHAIN)
    report = plan_memory(module)
    assert func_ints(module, "etc.buffer_sizes") == [0, 256]
    assert func_ints(module, "etc.lower_bounds") == [0, 256]
    results = [allocs(op)[0] for op in ops_of(module)[:-1]]
    assert [r[0] for r in results] == [1, 1, 1, 1] and all(r[2] == 128 for r in results)
    assert [r[1] for r in results] in ([0, 128, 0, 128], [128, 0, 128, 0])
    assert arg_alloc(module, 0) is None  # inputs are supplied at execute by default
    assert report.methods["forward"].pools[1].planned_bytes == 256
    assert_no_collisions(report)


def test_naive_gives_every_value_its_own_bytes():
    module = parse(CHAIN)
    report = plan_memory(module, algorithm="naive")
    assert func_ints(module, "etc.buffer_sizes") == [0, 512]
    assert func_ints(module, "etc.lower_bounds") == [0, 256]
    assert str(report).splitlines()[0].startswith("memory plan (naive")


def test_graph_inputs_and_outputs_are_planned_on_request():
    module = parse(CHAIN.replace(f"%x: {T}", f"%x: {T} {{user.note = 1 : i64}}"))
    plan_memory(module, alloc_graph_input=True, alloc_graph_output=False)
    assert arg_alloc(module, 0) is not None and arg_alloc(module, 0)[2] == 128
    assert allocs(ops_of(module)[3]) == [None]  # the returned value's memory comes from the caller
    with module.context:
        arg_dict = ir.DictAttr(ir.ArrayAttr(func_named(module).attributes["arg_attrs"])[0])
        assert "user.note" in arg_dict  # other argument attributes survive
    assert func_ints(module, "etc.buffer_sizes") == [0, 256]


RESIDUAL = f"""
ml_program.global private @weight(#ml_program.extern : {T}) : {T}
func.func @forward(%x: {T}) -> {T} {{
  %w = ml_program.global_load_const @weight : {T}
  %0 = "edge.mul_tensor"(%x, %w) : ({T}, {T}) -> {T}
  %1 = "edge.relu"(%0) : ({T}) -> {T}
  %2 = "edge.sigmoid"(%1) : ({T}) -> {T}
  %3 = "edge.add_tensor"(%2, %0) : ({T}, {T}) -> {T}
  %c = "arith.constant"() {{value = 3 : i64}} : () -> i64
  %4 = "edge.relu"(%3) : ({T}) -> {T}
  return %4 : {T}
}}
"""


def test_constants_and_scalars_are_not_planned_and_long_lived_values_keep_their_bytes():
    module = parse(RESIDUAL)
    report = plan_memory(module)
    ops = ops_of(module)
    assert allocs(ops[0]) == [None]  # the weight lives in the constant segment
    assert allocs(ops[5]) == [None]  # an i64 is not a tensor
    assert "etc.alloc" not in ops[-1].attributes  # func.return has no results
    # %0 is read again by step 4, so it is live with %1 and %2: three values of 128 bytes at once.
    assert func_ints(module, "etc.lower_bounds") == [0, 384]
    assert func_ints(module, "etc.buffer_sizes") == [0, 384]
    assert_no_collisions(report)


VIEWS = f"""
func.func @forward(%x: {T}) -> tensor<32xf32> {{
  %0 = "edge.relu"(%x) : ({T}) -> {T}
  %1 = "edge.view"(%0) {{size = array<i64: 32>}} : ({T}) -> tensor<32xf32>
  %2 = "edge.sigmoid"(%1) : (tensor<32xf32>) -> tensor<32xf32>
  %3 = "edge.permute"(%0) {{dims = array<i64: 1, 0>}} : ({T}) -> tensor<8x4xf32>
  %4 = "edge.view"(%3) {{size = array<i64: 32>}} : (tensor<8x4xf32>) -> tensor<32xf32>
  %5 = "edge.add_tensor"(%2, %4) : (tensor<32xf32>, tensor<32xf32>) -> tensor<32xf32>
  %6 = "edge.unsqueeze"(%x) {{dim = 0 : i64}} : ({T}) -> tensor<1x4x8xf32>
  return %5 : tensor<32xf32>
}}
"""


def test_views_share_storage_and_permute_is_a_copy():
    module = parse(VIEWS)
    report = plan_memory(module)
    relu, view, sigmoid, permute, view_of_permute, add, unsqueeze_input = [allocs(op)[0] for op in ops_of(module)[:-1]]
    assert view == relu  # same mem_id, offset and size
    assert view_of_permute == permute
    assert permute[1] != relu[1]  # a transposed copy needs its own bytes
    # The view of the relu result keeps the relu storage alive until step 4 (permute), so sigmoid
    # (step 3) cannot reuse it.
    assert sigmoid[1] not in (relu[1], permute[1])
    # A view of a runtime-supplied input cannot alias it: it becomes a planned copy.
    assert unsqueeze_input is not None and unsqueeze_input[2] == 128
    assert report.methods["forward"].pools[1].allocations == 5  # relu+view, sigmoid, permute+view, add, unsqueeze
    assert_no_collisions(report)


def test_a_view_returned_unplanned_does_not_alias_planned_storage():
    text = f"""
    func.func @forward(%x: {T}) -> tensor<32xf32> {{
      %0 = "edge.relu"(%x) : ({T}) -> {T}
      %1 = "edge.view"(%0) {{size = array<i64: 32>}} : ({T}) -> tensor<32xf32>
      return %1 : tensor<32xf32>
    }}
    """
    module = parse(text)
    plan_memory(module, alloc_graph_output=False)
    relu, view, _ = ops_of(module)
    assert allocs(relu)[0] is not None and allocs(view) == [None]
    module = parse(text)
    plan_memory(module, alloc_graph_output=True)
    relu, view, _ = ops_of(module)
    assert allocs(view) == allocs(relu)


def test_dynamic_tensors_are_planned_at_their_upper_bound():
    module = parse("""
    func.func @forward(%x: tensor<?x8xf32> {etc.dim_bounds = array<i64: 1, 10, 8, 8>}) -> tensor<?x8xf32> {
      %0 = "edge.relu"(%x) {etc.upper_bounds = array<i64: 10, 8>} : (tensor<?x8xf32>) -> tensor<?x8xf32>
      %1 = "edge.relu"(%0) {etc.upper_bounds = array<i64: 10, 8>} : (tensor<?x8xf32>) -> tensor<?x8xf32>
      return %1 : tensor<?x8xf32>
    }
    """)
    plan_memory(module, alloc_graph_input=True)
    assert arg_alloc(module, 0)[2] == 320
    assert [allocs(op)[0][2] for op in ops_of(module)[:2]] == [320, 320]


def test_unbounded_dynamic_dimension_is_an_error():
    module = parse("""
    func.func @forward(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
      %0 = "edge.relu"(%x) : (tensor<?x8xf32>) -> tensor<?x8xf32>
      return %0 : tensor<?x8xf32>
    }
    """)
    with pytest.raises(MemoryPlanningError, match="dimension 0 .* has no upper bound"):
        plan_memory(module)


def test_mem_id_callback_moves_large_values_to_a_second_pool():
    big = "tensor<64x8xf32>"  # 2048 bytes
    module = parse(f"""
    func.func @forward(%x: {T}) -> {T} {{
      %0 = "edge.relu"(%x) : ({T}) -> {T}
      %1 = "edge.expand"(%0) {{size = array<i64: 64, 8>}} : ({T}) -> {big}
      %2 = "edge.sum_dim"(%1) : ({big}) -> {T}
      %3 = "edge.relu"(%2) : ({T}) -> {T}
      return %3 : {T}
    }}
    """)
    seen = []

    def slow_pool_for_big(info):
        seen.append((info.op_name, info.kind, info.nbytes))
        return 2 if info.nbytes > 1024 else 1

    report = plan_memory(module, mem_id_for=slow_pool_for_big)
    assert ("edge.expand", "intermediate", 2048) in seen and ("edge.relu", "output", 128) in seen
    assert allocs(ops_of(module)[1])[0] == (2, 0, 2048)
    assert func_ints(module, "etc.buffer_sizes") == [0, 256, 2048]
    assert func_ints(module, "etc.lower_bounds") == [0, 256, 2048]
    assert sorted(report.methods["forward"].pools) == [1, 2]
    assert "2,048" in str(report)


@pytest.mark.parametrize("bad", [0, -1, "1", None])
def test_bad_mem_id_from_callback_is_an_error(bad):
    with pytest.raises(MemoryPlanningError, match="mem_id_for returned"):
        plan_memory(parse(CHAIN), mem_id_for=lambda info: bad)


def test_user_algorithm_is_called_and_checked():
    seen = []

    def stack_everything(intervals, alignment):
        seen.append(sorted((iv.start, iv.end, iv.size) for iv in intervals))
        offsets, top = {}, 0
        for iv in intervals:
            offsets[iv.value_id], top = top, top + iv.size
        return offsets

    module = parse(CHAIN)
    report = plan_memory(module, algorithm=stack_everything)
    assert seen == [[(1, 2, 128), (2, 3, 128), (3, 4, 128), (4, 5, 128)]]
    assert report.algorithm == "stack_everything"
    assert func_ints(module, "etc.buffer_sizes") == [0, 512]

    with pytest.raises(MemoryPlanningError, match="overlaps values"):
        plan_memory(parse(CHAIN), algorithm=lambda intervals, alignment: {iv.value_id: 0 for iv in intervals})


def test_alignment_rounds_sizes_and_offsets():
    module = parse("""
    func.func @forward(%x: tensor<3xi1>) -> tensor<3xf16> {
      %0 = "edge.logical_not"(%x) : (tensor<3xi1>) -> tensor<3xi1>
      %1 = "edge.to_copy"(%0) : (tensor<3xi1>) -> tensor<3xf16>
      %2 = "edge.to_copy"(%1) : (tensor<3xf16>) -> tensor<3xi64>
      %3 = "edge.to_copy"(%2) : (tensor<3xi64>) -> tensor<3xf16>
      return %3 : tensor<3xf16>
    }
    """)
    plan_memory(module, alignment=64)
    assert [allocs(op)[0][2] for op in ops_of(module)[:4]] == [64, 64, 64, 64]
    assert all(allocs(op)[0][1] % 64 == 0 for op in ops_of(module)[:4])
    plan_memory(module, alignment=1)  # planning again replaces the earlier plan
    assert [allocs(op)[0][2] for op in ops_of(module)[:4]] == [3, 6, 24, 6]
    assert func_ints(module, "etc.buffer_sizes") == [0, 30]


def test_delegates_are_planned_and_private_functions_are_not_methods():
    module = parse(f"""
    func.func private @delegate_body(%a: {T}) -> ({T}, {T}) {{
      %0 = "edge.relu"(%a) : ({T}) -> {T}
      return %0, %0 : {T}, {T}
    }}
    func.func @forward(%x: {T}) -> {T} {{
      %0:2 = "backend.delegate"(%x) {{backend_id = "cpu"}} : ({T}) -> ({T}, {T})
      %1 = "backend.view"(%0#1) : ({T}) -> {T}
      %2 = "edge.add_tensor"(%0#0, %1) : ({T}, {T}) -> {T}
      return %2 : {T}
    }}
    """)
    report = plan_memory(module)
    assert list(report.methods) == ["forward"]
    delegate, view, add, _ = ops_of(module)
    first, second = allocs(delegate)
    assert first[1] != second[1] and allocs(view)[0] == second
    assert "etc.alloc" not in ops_of(module, "delegate_body")[0].attributes
    assert func_ints(module, "etc.lower_bounds") == [0, 384]


def test_every_public_function_is_a_method_with_its_own_plan():
    module = parse(CHAIN + CHAIN.replace("@forward", "@encode").replace("edge.tanh", "edge.exp"))
    report = plan_memory(module)
    assert sorted(report.methods) == ["encode", "forward"]
    assert func_ints(module, "etc.buffer_sizes", "encode") == [0, 256]
    assert report.total_planned_bytes() == 512 == report.total_lower_bound()
    assert report.to_dict()["methods"]["encode"]["1"] == {"planned_bytes": 256, "lower_bound": 256, "allocations": 4}


def test_pass_options_are_parsed_from_pipeline_strings():
    assert options_from_strings({"algorithm": "naive", "alignment": "64", "alloc-graph-input": "true",
                                 "alloc-graph-output": "0"}) == {
        "algorithm": "naive", "alignment": 64, "alloc_graph_input": True, "alloc_graph_output": False}
    for options, message in [({"alignment": "x"}, "expects an integer"), ({"alloc-graph-input": "maybe"}, "true or false"),
                             ({"colour": "red"}, "unknown option 'colour'")]:
        with pytest.raises(MemoryPlanningError, match=message):
            options_from_strings(options)
    module = parse(CHAIN)
    report = run_memory_planning_pass(module, {"algorithm": "naive"})
    assert report.algorithm == "naive" and func_ints(module, "etc.buffer_sizes") == [0, 512]
    with pytest.raises(MemoryPlanningError, match="unknown memory planning algorithm"):
        run_memory_planning_pass(parse(CHAIN), {"algorithm": "optimal"})
