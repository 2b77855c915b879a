"""No candidate and no broken file can end the lab's commands, and no traceback reaches a user (issue 37,
6-8).

- register.py that exits (sys.exit(0)), is interrupted or raises: `kda validate` reports it and goes on
  over
every
  task; `kda check --interpret` exits non-zero with one line; a candidate that exits at call time fails its
  row.
- task.toml values of the wrong type (arch = ["h200"], atol = "tiny", tolerances = 3): one clear line each
  in validate, tasks and check, and `kda export --check` does not say ok.
- a ledger that is not UTF-8: one line in validate, tasks and report.
- `kda check --interpret --rows nosuch`: a clear error, exit 2.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kda_lab import cli
from tests.test_interpret_candidate import FSS, REPO, ROTARY, task_copy

REPO_FSS_SRC = REPO / "kernels" / FSS / "src"

EXITS = {
    "SystemExit": "import sys\nsys.exit(0)\n",
    "KeyboardInterrupt": "raise KeyboardInterrupt\n",
    "RuntimeError": "raise RuntimeError('no GPU here')\n",
}


def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, register: str | None = None) -> Path:
    """A lab holding FSS (its register.py replaced when given) and, after it in order, the rotary task."""
    task_copy(tmp_path / "lab", ROTARY, None, monkeypatch)
    return task_copy(tmp_path / "lab", FSS, register, monkeypatch)


def kda(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    text = out.out + out.err
    assert "Traceback" not in text
    return rc, text


@pytest.mark.parametrize("kind", sorted(EXITS))
def test_validate_goes_on_over_every_task_whatever_a_register_py_does(tmp_path, monkeypatch, capsys, kind):
    lab(tmp_path, monkeypatch, EXITS[kind])
    rc, out = kda(capsys, "validate")
    assert rc == 1, out
    assert f"INVALID {FSS}" in out and kind in out
    assert f"ok      {ROTARY}" in out  # the task after the broken one was validated too


@pytest.mark.parametrize("kind", sorted(EXITS))
def test_check_interpret_refuses_a_register_py_that_exits_or_raises(tmp_path, monkeypatch, capsys, kind):
    lab(tmp_path, monkeypatch, EXITS[kind])
    rc, out = kda(capsys, "check", FSS, "--interpret", "--no-record")
    assert rc == 2 and f"importing the candidate raised {kind}" in out, out


def test_a_candidate_that_exits_at_call_time_fails_its_row():
    from kda_lab.families import contract
    from kda_lab.measure.correctness import check_row
    from kda_lab.task import load_task
    from tests.conftest import REPO

    task = load_task(REPO / "kernels" / FSS)
    w = next(w for w in task.workloads if w.name == "test_tail_bc_modulation")

    def leaves(**_):
        raise SystemExit(0)

    (res,) = check_row(task, w, contract(task.family, w.fn), {"candidate": leaves}, seed=1, device="cpu")
    assert not res.ok and "raised SystemExit" in res.error


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        ('arch = "h200"', 'arch = ["h200"]', "arch = ['h200'] must be a string"),
        ("{ atol = 6.25e-2,", '{ atol = "tiny",', "atol = 'tiny' must be a number"),
        ("slug = ", "tolerances = 3\nslug = ", "tolerances = 3 must be a table"),
    ],
)
def test_task_toml_types_are_one_line_each(tmp_path, monkeypatch, capsys, old, new, said):
    task = lab(tmp_path, monkeypatch)
    toml = task / "task.toml"
    text = toml.read_text()
    assert old in text
    toml.write_text(
        text.replace(old, new, 1).replace("[tolerances]", "[tolerances_moved]")
        if new.startswith("tolerances")
        else text.replace(old, new, 1)
    )
    rc, out = kda(capsys, "validate")
    assert rc == 1 and said in out, out
    rc, out = kda(capsys, "tasks")
    assert rc == 1 and f"{FSS:<52} INVALID" in out and said in out, out
    rc, out = kda(capsys, "check", FSS, "--interpret", "--no-record")
    assert rc == 2 and said in out, out
    from kda_lab.export.check import check

    rc = check(tmp_path / "lab", out=print)
    text = capsys.readouterr().out
    assert rc == 1 and said in text and "ok:" not in text


def test_a_ledger_that_is_not_utf8_is_one_line(tmp_path, monkeypatch, capsys):
    task = lab(tmp_path, monkeypatch)
    with (task / "benchmark.csv").open("ab") as f:
        f.write(b"\xff\xfe not text\n")
    rc, out = kda(capsys, "validate", FSS)
    assert rc == 1 and "not UTF-8" in out, out
    rc, out = kda(capsys, "tasks")
    assert rc == 1 and "not UTF-8" in out, out
    rc, out = kda(capsys, "report", "--check")
    assert rc != 0 and "not UTF-8" in out, out


def test_interpret_rows_must_exist(tmp_path, monkeypatch, capsys):
    lab(tmp_path, monkeypatch)
    rc, out = kda(capsys, "check", FSS, "--interpret", "--no-record", "--rows", "nosuch")
    assert rc == 2 and "unknown rows ['nosuch']" in out, out


def test_no_record_never_hands_out_a_candidate_id(tmp_path, monkeypatch, capsys):
    """A --no-record run of a new source hash printed c0NN, and the next recorded run gave c0NN to another
    hash.
    """
    from kda_lab.ledger import read_solutions

    task = lab(tmp_path, monkeypatch, (REPO_FSS_SRC / "register.py").read_text() + "\n# revision A\n")
    rc, out = kda(capsys, "check", FSS, "--interpret", "--no-record", "--rows", "test_tail_bc_modulation")
    assert rc == 0 and "candidate unrecorded" in out, out
    ids_before = {r["id"] for r in read_solutions(task)}
    (task / "src" / "register.py").write_text((REPO_FSS_SRC / "register.py").read_text() + "\n# revision B\n")
    rc, out = kda(capsys, "check", FSS, "--interpret", "--rows", "test_tail_bc_modulation")
    new = [r for r in read_solutions(task) if r["id"] not in ids_before]
    assert new and all(r["event"] in ("register", "interpret") for r in new)
    assert len({r["source_hash"] for r in new}) == 1  # the new id belongs to revision B alone
