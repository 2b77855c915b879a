"""kda_lab.evidence: which GPU a ledger row comes from, and the lines `kda doctor`/`check`/`bench` print."""

from __future__ import annotations

import pytest

from kda_lab.doctor import gpu_evidence_line
from kda_lab.evidence import counts_for, evidence_arch, gpu_model_arch, not_evidence_notice, table_gaps

# Names as torch.cuda.get_device_name / nvidia-smi report them.
NAMES = [
    ("NVIDIA H200", (9, 0), "h200"),
    ("NVIDIA H200 NVL", (9, 0), "h200"),
    ("NVIDIA H100 80GB HBM3", (9, 0), "h100"),
    ("NVIDIA H100 PCIe", (9, 0), "h100"),
    ("NVIDIA GH200 480GB", (9, 0), "gh200"),  # Grace Hopper: an H100-class GPU, not an H200
    ("NVIDIA B200", (10, 0), "b200"),
    ("NVIDIA GB200", (10, 0), "gb200"),
    ("NVIDIA A100-SXM4-80GB", (8, 0), "a100"),
    ("NVIDIA H200", (8, 0), "h200?sm80"),  # a name and a capability that disagree are no lab arch
    ("cpu", None, "cpu"),
]


@pytest.mark.parametrize("name,cc,arch", NAMES)
def test_the_gpu_name_decides_the_arch(name, cc, arch):
    assert evidence_arch(name, cc) == arch


def test_an_h100_row_never_counts_for_h200():
    h100 = "NVIDIA H100 80GB HBM3"
    assert gpu_model_arch(h100) == "h100"
    assert not counts_for("h200", "h200", h100, "9.0")  # written by the harness before the name decided
    assert not counts_for("h200", "h100", h100, "9.0")
    assert counts_for("h200", "h200", "NVIDIA H200", "9.0")
    assert counts_for("h200", "h200", "NVIDIA H200")  # solutions.jsonl rows carry no capability
    assert not counts_for("h200", "h200", "NVIDIA H200", "10.0")
    assert not counts_for("b200", "b200", "NVIDIA GB200", "10.0")


def test_doctor_says_which_gpu_and_where_its_rows_count():
    assert gpu_evidence_line("NVIDIA H200", (9, 0)) == "NVIDIA H200 cc 9.0: rows count as h200 evidence (h200_* tasks)"
    line = gpu_evidence_line("NVIDIA H100 80GB HBM3", (9, 0))
    assert "recorded as 'h100'" in line and "count for no task" in line and "only an H200" in line
    assert "only a B200" in gpu_evidence_line("NVIDIA GB200", (10, 0))
    assert "no lab arch has this capability" in gpu_evidence_line("NVIDIA A100-SXM4-80GB", (8, 0))


def test_check_and_bench_say_once_that_rows_will_not_count():
    assert not_evidence_notice("h200", "NVIDIA H200", "h200") is None
    line = not_evidence_notice("h200", "NVIDIA H100 80GB HBM3", "h100")
    assert line is not None and "\n" not in line
    assert line.startswith("NOT EVIDENCE") and "do not count for h200" in line and "an H200" in line


def test_table_gaps_name_missing_and_non_finite_rows():
    table = {"a": "f", "b": "f", "c": "g"}
    rows = [{"row": "a", "function": "f", "row_kind": "production", "speedup": "1.2"},
            {"row": "b", "function": "f", "row_kind": "production", "speedup": ""},
            {"row": "c", "function": "f", "row_kind": "production", "speedup": "1.1"},  # wrong function
            {"row": "x", "function": "f", "row_kind": "test", "speedup": "9"}]
    assert table_gaps(rows, table) == (["c"], ["b"])
    rows[1]["speedup"], rows[2]["function"] = "inf", "g"
    assert table_gaps(rows, table) == ([], ["b"])
    rows[1]["speedup"] = "0.97"
    assert table_gaps(rows, table) == ([], [])
