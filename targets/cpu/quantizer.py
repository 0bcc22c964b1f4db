"""`CpuQuantizer`: PT2E int8 quantization for the cpu target, used as ExecuTorch's XNNPACKQuantizer is.

    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e, convert_pt2e
    from etc.targets.cpu import CpuQuantizer, get_symmetric_quantization_config

    quantizer = CpuQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    model = torch.export.export(model, inputs).module()
    model = prepare_pt2e(model, quantizer); model(*calibration); model = convert_pt2e(model)
    edge = etc.to_edge(torch.export.export(model, inputs))

Why our own annotator and not XNNPACK's: etc never imports executorch, and what is
annotated is what the cpu target will run in int8; torchao (the PT2E flow itself: observers,
`prepare_pt2e`/`convert_pt2e`, the `Quantizer` base class) is the one dependency, imported
only when this module is.

The scheme is the one XNNPACK and the int8 kernels of edge CPUs use: weights int8
symmetric (per output channel, or per tensor), activations int8 affine per tensor, either
calibrated (static: observers, scales baked in at convert time) or computed per call
(dynamic: `choose_qparams` in the graph, float outputs). Bias stays float (the kernel folds
it into the int32 accumulator with scale input*weight).

What is annotated is data (`_PATTERNS` and `_SHARED_SCALE_OPS` below): a contraction
(conv incl. depthwise, linear, matmul) or binary op (add, mul) and the ReLU-family op that
follows it alone, quantized as one (the clamp becomes the output range); pooling, concat,
zero padding and shape ops (view, permute, flatten, ...) share their input's scale, so no
requantization happens around them. Anything else stays float between a dequantize and a quantize.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass

import torch
from torch.fx import GraphModule, Node
from torchao.quantization.pt2e import (FusedMovingAvgObsFakeQuantize, HistogramObserver, MinMaxObserver,
                                       MovingAveragePerChannelMinMaxObserver, PerChannelMinMaxObserver,
                                       PlaceholderObserver)
from torchao.quantization.pt2e.quantizer import (QuantizationAnnotation, QuantizationConfig, QuantizationSpec,
                                                 Quantizer, SharedQuantizationSpec)

from etc.errors import UnsupportedConstructError

__all__ = ["CpuQuantizer", "get_symmetric_quantization_config", "QuantizationConfig"]

_aten = torch.ops.aten

# ------------------------------------------------------------------ configs


@functools.lru_cache
def get_symmetric_quantization_config(is_per_channel: bool = False, is_qat: bool = False, is_dynamic: bool = False,
                                      act_qmin: int = -128, act_qmax: int = 127, weight_qmin: int = -127,
                                      weight_qmax: int = 127) -> QuantizationConfig:
    """XNNPACK's int8 scheme (same arguments as ExecuTorch's function of this name).

    Weights: int8 symmetric in [weight_qmin, weight_qmax] (-127..127 keeps -w representable),
    per output channel when `is_per_channel`. Activations: int8 affine per tensor, from a
    histogram observer (static) or computed on every call (`is_dynamic`). `is_qat` uses fake
    quantization with moving averages for quantization-aware training.
    """
    extra = {"eps": 2 ** -12}
    if is_qat:
        if is_dynamic:
            raise UnsupportedConstructError("get_symmetric_quantization_config: is_qat with is_dynamic is not "
                                            "supported by the cpu target (train statically, or quantize "
                                            "dynamically after training)")
        act_ctr = FusedMovingAvgObsFakeQuantize
    else:
        act_ctr = PlaceholderObserver if is_dynamic else HistogramObserver
    activation = QuantizationSpec(dtype=torch.int8, quant_min=act_qmin, quant_max=act_qmax,
                                  qscheme=torch.per_tensor_affine, is_dynamic=is_dynamic,
                                  observer_or_fake_quant_ctr=act_ctr.with_args(**extra))
    if is_per_channel:
        weight_ctr = MovingAveragePerChannelMinMaxObserver if is_qat else PerChannelMinMaxObserver
        qscheme = torch.per_channel_symmetric
    else:
        weight_ctr = MinMaxObserver
        qscheme = torch.per_tensor_symmetric
    if is_qat:
        weight_ctr = FusedMovingAvgObsFakeQuantize.with_args(observer=weight_ctr, **extra)
    else:
        weight_ctr = weight_ctr.with_args(**extra)
    weight = QuantizationSpec(dtype=torch.int8, quant_min=weight_qmin, quant_max=weight_qmax, qscheme=qscheme,
                              ch_axis=0, is_dynamic=False, observer_or_fake_quant_ctr=weight_ctr)
    return QuantizationConfig(activation, None if is_dynamic else activation, weight, None, is_qat)


# What the cpu target runs in int8: (dtype, qscheme) pairs of each role.
_ACTIVATION_SCHEMES = {(torch.int8, torch.per_tensor_affine), (torch.int8, torch.per_tensor_symmetric)}
_WEIGHT_SCHEMES = {(torch.int8, torch.per_channel_symmetric), (torch.int8, torch.per_tensor_symmetric)}


def _check_config(config: QuantizationConfig, node: Node | None = None) -> None:
    """A scheme the cpu target cannot run is an error naming what and where, at annotate time."""
    problems = []
    for role, spec, allowed in (("input activation", config.input_activation, _ACTIVATION_SCHEMES),
                                ("output activation", config.output_activation, _ACTIVATION_SCHEMES),
                                ("weight", config.weight, _WEIGHT_SCHEMES)):
        if spec is None:
            dynamic = config.input_activation is not None and config.input_activation.is_dynamic
            if not (role == "output activation" and dynamic):
                problems.append(f"no {role} spec")
            continue
        if (spec.dtype, spec.qscheme) not in allowed:
            problems.append(f"{role} {spec.dtype} {spec.qscheme} (supported: "
                            f"{', '.join(sorted(f'{d} {q}' for d, q in allowed))})")
        if role == "weight" and spec.qscheme == torch.per_channel_symmetric and spec.ch_axis != 0:
            problems.append(f"weight channel axis {spec.ch_axis} (the cpu target quantizes output channels, axis 0)")
    if config.bias is not None:
        problems.append("a bias spec (the cpu target keeps bias in float and folds it into the int32 accumulator)")
    if not problems:
        return
    where, notes = None, []
    if node is not None:
        from etc.ir.locations import node_source_position

        position = node_source_position(node)
        where = str(position) if position else None
        notes.append(f"FX node: {node.format_node()}")
    op = f" for {node.target}" if node is not None else ""
    raise UnsupportedConstructError(f"CpuQuantizer: unsupported quantization scheme{op}: {'; '.join(problems)}",
                                    location=where, notes=notes)


# ----------------------------------------------------------------- patterns
_CONV = (_aten.conv1d.default, _aten.conv2d.default, _aten.conv1d.padding, _aten.conv2d.padding)
_LINEAR = (_aten.linear.default,)
_MATMUL = (_aten.matmul.default, _aten.bmm.default, _aten.mm.default)
_BINARY = (_aten.add.Tensor, _aten.add_.Tensor, _aten.mul.Tensor, _aten.mul_.Tensor)
_RELU_FAMILY = (_aten.relu.default, _aten.relu_.default, _aten.hardtanh.default, _aten.hardtanh_.default,
                _aten.relu6.default, _aten.clamp.default)
# Ops whose output keeps the input's scale and zero point (a permutation, a window max or
# mean of values that are all in the input's range, a reshape): no requantization.
_SHARED_SCALE_OPS = {
    _aten.max_pool2d.default, _aten.avg_pool2d.default, _aten.adaptive_avg_pool2d.default, _aten.mean.dim,
    _aten.max_pool1d.default, _aten.avg_pool1d.default, _aten.adaptive_avg_pool1d.default,
    _aten.view.default, _aten.reshape.default, _aten.flatten.using_ints, _aten.permute.default,
    _aten.transpose.int, _aten.squeeze.dim, _aten.squeeze.default, _aten.unsqueeze.default,
    _aten.slice.Tensor, _aten.select.int, _aten.pixel_shuffle.default, _aten.contiguous.default,
    _aten.clone.default, _aten.dropout.default,
}
_CAT = (_aten.cat.default, _aten.concat.default)
# Zero padding shares its input's scale too: 0 is the zero point, exactly (PT2E's ranges include 0),
# so the int8 pad fills with it. transformers' MobileNetV2 pads before every strided conv (TF's
# "same"): unannotated, each pad was a float round trip (dequantize, pad, quantize).
_CONSTANT_PADS = (_aten.constant_pad_nd.default, _aten.pad.default)


def _zero_pad(node: Node) -> bool:
    """A constant pad whose value is 0 (`aten.pad`'s mode "constant", its value None meaning 0)."""
    if node.target == _aten.constant_pad_nd.default:
        value = node.args[2] if len(node.args) > 2 else node.kwargs.get("value", 0)
        return value == 0
    mode = node.args[2] if len(node.args) > 2 else node.kwargs.get("mode", "constant")
    value = node.args[3] if len(node.args) > 3 else node.kwargs.get("value")
    return mode == "constant" and value in (None, 0)


@dataclass(frozen=True)
class _Pattern:
    """One annotator: the anchor ops, which inputs are weights, and whether a ReLU-family
    successor is folded in. `dynamic` says whether it applies under a dynamic config."""

    ops: tuple
    weight_arg: int | None  # positional index of the weight, for conv/linear
    fuse_relu: bool
    dynamic: bool


_PATTERNS = (
    _Pattern(_CONV, weight_arg=1, fuse_relu=True, dynamic=True),
    _Pattern(_LINEAR, weight_arg=1, fuse_relu=True, dynamic=True),
    _Pattern(_MATMUL, weight_arg=None, fuse_relu=True, dynamic=False),
    _Pattern(_BINARY, weight_arg=None, fuse_relu=True, dynamic=False),
)


def _annotated(node: Node) -> bool:
    annotation = node.meta.get("quantization_annotation")
    return annotation is not None and annotation._annotated


def _mark(node: Node, inputs: dict, output) -> None:
    node.meta["quantization_annotation"] = QuantizationAnnotation(input_qspec_map=inputs, output_qspec=output,
                                                                  _annotated=True)


def _single_relu_user(node: Node) -> Node | None:
    if len(node.users) != 1:
        return None
    (user,) = node.users
    return user if user.op == "call_function" and user.target in _RELU_FAMILY else None


def _is_float_tensor(arg) -> bool:
    value = arg.meta.get("val") if isinstance(arg, Node) else None
    return isinstance(value, torch.Tensor) and value.dtype.is_floating_point


# ---------------------------------------------------------------- quantizer
class CpuQuantizer(Quantizer):
    """Annotates an exported graph for PT2E int8 quantization on the cpu target.

    Configs: `set_global(config)`, and overrides: `set_module_type(nn.Conv2d, config)`,
    `set_module_name("features.0", config)`, `set_operator_type(torch.ops.aten.linear, config)`
    (a more specific setting wins: module name, module type, operator, then global). `None` as
    a config leaves those ops in float.
    """

    def __init__(self):
        super().__init__()
        self.global_config: QuantizationConfig | None = None
        self.module_type_config: dict[type, QuantizationConfig | None] = {}
        self.module_name_config: dict[str, QuantizationConfig | None] = {}
        self.operator_type_config: dict = {}

    def set_global(self, config: QuantizationConfig | None) -> "CpuQuantizer":
        if config is not None:
            _check_config(config)
        self.global_config = config
        return self

    def set_module_type(self, module_type: type, config: QuantizationConfig | None) -> "CpuQuantizer":
        if config is not None:
            _check_config(config)
        self.module_type_config[module_type] = config
        return self

    def set_module_name(self, module_name: str, config: QuantizationConfig | None) -> "CpuQuantizer":
        if config is not None:
            _check_config(config)
        self.module_name_config[module_name] = config
        return self

    def set_operator_type(self, operator_type, config: QuantizationConfig | None) -> "CpuQuantizer":
        """A config for one ATen operator (`torch.ops.aten.linear`, all overloads)."""
        if config is not None:
            _check_config(config)
        self.operator_type_config[operator_type] = config
        return self

    # -------------------------------------------------------------- config lookup
    def _config_for(self, node: Node) -> QuantizationConfig | None:
        stack = node.meta.get("nn_module_stack") or {}
        entries = list(stack.values())
        for name, config in self.module_name_config.items():
            if any(fqn == name or fqn.startswith(name + ".") for fqn, _ in entries):
                return config
        for module_type, config in self.module_type_config.items():
            qualified = f"{module_type.__module__}.{module_type.__qualname__}"
            if any(kind is module_type or kind == qualified for _, kind in entries):
                return config
        packet = getattr(node.target, "overloadpacket", None)
        if packet is not None and packet in self.operator_type_config:
            return self.operator_type_config[packet]
        return self.global_config

    # -------------------------------------------------------------- annotate
    def annotate(self, model: GraphModule) -> GraphModule:
        graph = model.graph
        for node in graph.nodes:
            if node.op != "call_function" or _annotated(node):
                continue
            pattern = next((p for p in _PATTERNS if node.target in p.ops), None)
            if pattern is None:
                continue
            config = self._config_for(node)
            if config is None:
                continue
            _check_config(config, node)
            dynamic = config.input_activation.is_dynamic
            if dynamic and not pattern.dynamic:
                continue
            self._annotate_compute(node, pattern, config)
        if self.global_config is None or not self.global_config.input_activation.is_dynamic:
            for node in graph.nodes:  # in topological order: a producer is annotated before its users
                if node.op != "call_function" or _annotated(node):
                    continue
                config = self._config_for(node)
                if config is None or config.input_activation.is_dynamic:
                    continue
                if node.target in _CAT:
                    self._annotate_cat(node, config)
                elif node.target in _SHARED_SCALE_OPS or (node.target in _CONSTANT_PADS and _zero_pad(node)):
                    self._annotate_shared(node, config)
        return model

    def _annotate_compute(self, node: Node, pattern: _Pattern, config: QuantizationConfig) -> None:
        inputs = {}
        for index, arg in enumerate(node.args[:2]):
            if not isinstance(arg, Node) or not _is_float_tensor(arg):
                continue
            inputs[arg] = config.weight if index == pattern.weight_arg else config.input_activation
        if pattern.weight_arg is not None and len(node.args) <= pattern.weight_arg:
            return
        if not inputs:
            return
        relu = _single_relu_user(node) if pattern.fuse_relu and config.output_activation is not None else None
        if relu is not None and not _annotated(relu):
            _mark(node, inputs, None)
            _mark(relu, {}, config.output_activation)
        else:
            _mark(node, inputs, config.output_activation)

    @staticmethod
    def _annotate_shared(node: Node, config: QuantizationConfig) -> None:
        """Output shares the input's quantization, when the input is quantized at all."""
        source = node.args[0] if node.args else None
        if not isinstance(source, Node) or not _is_float_tensor(source) or not _produces_quantized(source):
            return
        _mark(node, {source: config.input_activation}, SharedQuantizationSpec((source, node)))

    @staticmethod
    def _annotate_cat(node: Node, config: QuantizationConfig) -> None:
        """All inputs and the output share one scale (that of the first input's edge): concat is a copy."""
        tensors = node.args[0] if node.args else []
        if not tensors or not all(isinstance(t, Node) and _is_float_tensor(t) for t in tensors):
            return
        first = tensors[0]
        inputs = {first: config.input_activation}
        for other in tensors[1:]:
            if other is not first:
                inputs[other] = SharedQuantizationSpec((first, node))
        _mark(node, inputs, SharedQuantizationSpec((first, node)))

    def validate(self, model: GraphModule) -> None:
        """Nothing beyond what annotate checked."""


def _produces_quantized(node: Node) -> bool:
    """Whether `node`'s output is quantized by its annotation (or passes through getitem of one)."""
    if node.op == "call_function" and node.target is operator.getitem:
        node = node.args[0]
    annotation = node.meta.get("quantization_annotation")
    return annotation is not None and annotation.output_qspec is not None

