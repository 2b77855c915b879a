"""One status vocabulary: `kda tasks` and README's task table (kda report) say the same status for every task."""

from __future__ import annotations

import re
from pathlib import Path

from kda_lab.cli import main

REPO = Path(__file__).resolve().parents[1]


def readme_statuses() -> dict[str, str]:
    text = (REPO / "README.md").read_text()
    table = text.split("<!-- kda:tasks:start -->")[1].split("<!-- kda:tasks:end -->")[0]
    out = {}
    for line in table.splitlines():
        m = re.match(r"\| \[(\w+)\]\([^)]*\) \| \w+ \| \w+ \| ([^|]+) \|", line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def test_kda_tasks_and_the_readme_table_use_the_same_words(capsys) -> None:
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    statuses = readme_statuses()
    assert len(statuses) == len(list((REPO / "kernels").glob("*/task.toml")))
    for slug, status in statuses.items():
        line = next(line for line in out.splitlines() if line.startswith(slug + " "))
        assert f" {status} " in line, (slug, status, line)


def test_kda_tasks_prints_the_readme_tables_geomean(capsys) -> None:
    """One headline per task: `kda tasks` printed the best bench run's geomean while the README shows the
    promoted candidate's evidence run; they disagreed wherever a later or earlier run scored higher."""
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    text = (REPO / "README.md").read_text()
    table = text.split("<!-- kda:tasks:start -->")[1].split("<!-- kda:tasks:end -->")[0]
    seen = 0
    for line in table.splitlines():
        m = re.match(r"\| \[(\w+)\]\([^)]*\) \| \w+ \| \w+ \| [^|]+ \| ([^|]+) \|", line)
        if not m:
            continue
        slug, cell = m.group(1), m.group(2).strip()
        printed = next(line for line in out.splitlines() if line.startswith(slug + " ")).split()
        geo = next((w for w in printed if re.fullmatch(r"\d+\.\d{3}x|-", w)), None)
        if cell in ("–", ""):
            assert geo == "-", (slug, printed)
        else:
            seen += 1
            assert geo == cell.split()[0].replace("×", "x"), (slug, cell, printed)
    assert seen >= 3  # the promoted tasks at least
