"""The real-model bench section (bench/hf_models.py): its table and geomeans."""

from etc.bench.hf_models import geomean_etc_over_xnnpack, render


def _rows():
    return [{"name": "whole", "etc": 1e-3, "torch": 2e-3, "xnnpack": 2e-3, "xnnpack_portable_ops": []},
            {"name": "pooled", "etc": 1e-3, "torch": 2e-3, "xnnpack": 1.0,
             "xnnpack_portable_ops": ["aten::avg_pool2d", "aten::add", "aten::add"]},
            {"name": "no_reference", "etc": 1e-3, "torch": 2e-3}]


def test_geomean_over_all_and_over_models_executorch_ran_wholly_in_xnnpack():
    gm, n = geomean_etc_over_xnnpack(_rows())
    assert n == 2 and abs(gm - (0.5 * 1e-3) ** 0.5) < 1e-12
    assert geomean_etc_over_xnnpack(_rows(), all_delegated=True) == (0.5, 1)


def test_table_names_the_ops_executorch_left_outside_xnnpack():
    text = render(_rows())
    lines = text.splitlines()
    assert lines[2].endswith("| 0 |")
    assert lines[3].endswith("| 3: aten::avg_pool2d, aten::add x2 |")
    assert lines[4].endswith("| n/a |")
    assert "**Geomean etc cpu / ExecuTorch XNNPACK over the 2 model(s) both ran: 0.02x**" in text
    assert "Over the 1 model(s) ExecuTorch ran wholly in XNNPACK" in text and ": 0.50x." in text


def test_the_section_lists_each_models_decisions_off_the_tuned_path():
    rows = _rows()
    rows[0]["etc_not_tuned"] = []
    rows[1]["etc_not_tuned"] = ["NOT TUNED  reduction -> loops: a dynamic shape x3"]
    text = render(rows)
    assert "Decisions off the tuned path (the delegation report's NOT TUNED lines): " in text
    assert "- pooled: reduction -> loops: a dynamic shape x3" in text
    rows[1]["etc_not_tuned"] = []
    assert "NOT TUNED lines): none, in every model." in render(rows)
    assert "Decisions off the tuned path" not in render(_rows())  # no model compiled by etc


def test_not_tuned_lines_come_from_every_delegate_of_every_report():
    from types import SimpleNamespace

    from etc.bench.common import not_tuned_lines

    reports = [SimpleNamespace(backend_lines={"d0": ["tuned      contraction -> gemm x2", "NOT TUNED  a x1"]}),
               SimpleNamespace(backend_lines={"d1": [], "d2": ["NOT TUNED  b x2"]})]
    assert not_tuned_lines(reports) == ["NOT TUNED  a x1", "NOT TUNED  b x2"]
