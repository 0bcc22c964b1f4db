"""The quantization numerics report (devtools/quant_report.py): per quantized op, SQNR of etc's
output against the float model and the eager quantized model, from Python and `etc inspect`."""

import math

import pytest
import torch
from torch import nn

pytest.importorskip("torchao")

from etc.devtools.quant_report import quantization_report, sqnr  # noqa: E402
from etc.models.quantized import quantize, quantized_zoo  # noqa: E402
from etc.models.zoo import ZooModel  # noqa: E402


def test_every_quantized_op_of_a_cnn_has_a_row_with_both_sqnrs():
    zoo_model, _, ep = quantized_zoo("resnet8")
    report = quantization_report(zoo_model.module, ep, zoo_model.example_inputs)
    ops = [row.ops for row in report.rows]
    assert ops.count("convolution + relu") >= 3 and "add + relu" in ops and ops[-1] == "addmm"
    assert all(row.sqnr_reference > 40 for row in report.rows)  # etc computes what PyTorch's reference does
    assert all(row.sqnr_float is not None and 20 < row.sqnr_float < 80 for row in report.rows)  # BN folded as PT2E
    assert all(row.source and "zoo.py" in row.source for row in report.rows)
    text = str(report)
    assert "lowest SQNR against float" in text and "convolution + relu" in text


class _Damaged(nn.Module):
    """Two convs; the second has a huge weight on an input channel that is always 0 (a dead
    ReLU): it adds nothing to the output but sets the per-tensor weight scale, so every other
    weight of that conv rounds to 0 or +-1."""

    def __init__(self):
        super().__init__()
        self.first = nn.Conv2d(3, 8, 3, padding=1)
        self.second = nn.Conv2d(8, 8, 3, padding=1)
        with torch.no_grad():
            self.first.weight[0] = 0.0
            self.first.bias[0] = -1.0
            self.second.weight[0, 0, 0, 0] = 200.0

    def forward(self, x):
        return self.second(torch.relu(self.first(x)))


def test_the_layer_that_lost_accuracy_is_the_worst_row():
    torch.manual_seed(0)
    zoo_model = ZooModel("damaged", _Damaged().eval(), (torch.randn(1, 3, 8, 8),))
    _, ep = quantize(zoo_model, is_per_channel=False)
    report = quantization_report(zoo_model.module, ep, zoo_model.example_inputs)
    worst = report.worst()
    assert worst.node == "convolution_1" and worst.sqnr_float < report.rows[0].sqnr_float - 10


def test_dynamic_and_torchao_models_report_their_float_outputs():
    import copy

    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 16)).eval()
    reference = copy.deepcopy(model)
    quantize_(model, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32)))
    report = quantization_report(reference, model, (torch.randn(3, 64),))
    assert [row.node for row in report.rows] == ["addmm", "addmm_1"]
    assert all(math.isinf(row.sqnr_reference) or row.sqnr_reference > 60 for row in report.rows)
    assert all(10 < row.sqnr_float < 60 for row in report.rows)


def test_sqnr():
    assert math.isinf(sqnr([1.0, 2.0], [1.0, 2.0]))
    assert abs(sqnr([3.0, 4.0], [3.0, 4.5]) - 10 * math.log10(25 / 0.25)) < 1e-9


def test_etc_inspect_quant_report(tmp_path, capsys):
    zoo_model, _, ep = quantized_zoo("small_cnn")
    torch.export.save(ep, tmp_path / "q.pt2")
    torch.export.save(torch.export.export(zoo_model.module, zoo_model.example_inputs), tmp_path / "f.pt2")
    from etc.tools.etc_main import main

    assert main(["inspect", str(tmp_path / "q.pt2"), "--quant-report", str(tmp_path / "f.pt2")]) == 0
    out = capsys.readouterr().out
    assert "quantized op(s)" in out and "convolution + relu" in out and "lowest SQNR against float" in out
