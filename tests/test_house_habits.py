"""House habits (docs/workflow.md, "House habits"): the pre-commit hooks run and each rejects a deliberately
wrong input; the 110-column ratchet; one Humanize install line; no citation of files outside the repository;
`kda doctor` says for which arch this host's rows count; the task stubs are the pytest plugin's."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from kda_lab.cli import build_parser
from kda_lab.doctor import HUMANIZE_INSTALL, rows_count_for

REPO = Path(__file__).resolve().parents[1]
LIMIT = 110


def load_yaml(path: Path) -> dict:
    """PyYAML from .venv/e2e-site (scripts/setup_env.sh), on sys.path only while it imports: that folder also
    holds torchvision & co. for `kda e2e`, which must not leak into the other tests of this process."""
    e2e_site = str(Path(sys.executable).parent.parent / "e2e-site")
    added = e2e_site not in sys.path
    if added:
        sys.path.append(e2e_site)
    try:
        import yaml
    finally:
        if added:
            sys.path.remove(e2e_site)
    return yaml.safe_load(path.read_text())


def hooks() -> dict[str, dict]:
    config = load_yaml(REPO / ".pre-commit-config.yaml")
    return {h["id"]: h for repo in config["repos"] for h in repo["hooks"]}


def test_precommit_config_has_the_four_local_hooks() -> None:
    config = load_yaml(REPO / ".pre-commit-config.yaml")
    assert [r["repo"] for r in config["repos"]] == ["local"]  # nothing downloaded
    h = hooks()
    assert set(h) == {"ruff", "shellcheck", "kda-validate", "kda-report-check"}
    assert all(x["language"] == "system" for x in h.values())
    assert h["kda-validate"]["pass_filenames"] is False and h["kda-report-check"]["pass_filenames"] is False


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clone of the committed HEAD with this checkout's .venv, where the hooks run as after `git clone`."""
    repo = tmp_path_factory.mktemp("hooks") / "repo"
    subprocess.run(["git", "clone", "-q", str(REPO), str(repo)], check=True, capture_output=True)
    (repo / ".venv").symlink_to((REPO / ".venv").resolve())
    return repo


def run_hook(repo: Path, hook: dict, files: list[str]) -> subprocess.CompletedProcess[str]:
    args = [*hook["entry"].split(), *(files if hook.get("pass_filenames", True) else [])]
    env = {k: v for k, v in os.environ.items() if k not in ("KDA_ROOT", "PYTHONPATH")}
    return subprocess.run(args, cwd=repo, env=env, capture_output=True, text=True, timeout=900)


def tracked(repo: Path, *patterns: str) -> list[str]:
    return subprocess.run(["git", "ls-files", *patterns], cwd=repo, capture_output=True, text=True,
                          check=True).stdout.split()


@pytest.mark.slow
def test_each_hook_passes_on_a_clean_clone_and_rejects_a_wrong_input(clone: Path) -> None:
    h = hooks()
    files = {"ruff": tracked(clone, "*.py"), "shellcheck": tracked(clone, "*.sh", ".ci/run")}
    for hook_id, hook in h.items():
        r = run_hook(clone, hook, files.get(hook_id, []))
        assert r.returncode == 0, (hook_id, r.stdout[-3000:], r.stderr[-3000:])
    (clone / "unused_import.py").write_text("import os\n")
    assert run_hook(clone, h["ruff"], ["unused_import.py"]).returncode != 0
    (clone / "long_line.py").write_text(f"X = {'1' * LIMIT}\n")  # a new file over the column limit
    r = run_hook(clone, h["ruff"], ["long_line.py"])
    assert r.returncode != 0 and "E501" in r.stdout, r.stdout
    (clone / "unquoted.sh").write_text('#!/usr/bin/env bash\nrm -rf $1\n')
    assert run_hook(clone, h["shellcheck"], ["unquoted.sh"]).returncode != 0
    prompt = next((clone / "kernels").glob("h200_*/prompt.md"))
    prompt.write_text(prompt.read_text() + "\nTODO(stamp): left behind\n")
    r = run_hook(clone, h["kda-validate"], [])
    assert r.returncode != 0 and "unresolved TODO(stamp)" in r.stdout, r.stdout[-2000:]
    readme = clone / "README.md"
    readme.write_text(readme.read_text().replace("| promoted c009 |", "| promoted c001 |", 1))
    r = run_hook(clone, h["kda-report-check"], [])
    assert r.returncode != 0 and "README.md" in r.stderr, r.stderr[-2000:]


def exempt_files() -> list[str]:
    raw = tomllib.loads((REPO / "pyproject.toml").read_text())
    return [f for f, rules in raw["tool"]["ruff"]["lint"]["per-file-ignores"].items()
            if "E501" in rules and "*" not in f]


def over_limit(path: Path) -> bool:
    return any(len(line) > LIMIT for line in path.read_text().splitlines())


def test_the_line_limit_is_enforced_and_its_exemptions_only_shrink(tmp_path: Path) -> None:
    raw = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["ruff"]
    assert raw["line-length"] == LIMIT and "E501" not in raw["lint"].get("ignore", [])
    assert "E" in raw["lint"]["select"]
    fits = [f for f in exempt_files() if not (REPO / f).is_file() or not over_limit(REPO / f)]
    assert not fits, f"these fit in {LIMIT} columns now (or are gone): take them off pyproject.toml: {fits}"
    short = tmp_path / "short.py"
    short.write_text("X = 1\n")
    assert not over_limit(short)  # the check above would name a listed file like this one


def test_one_humanize_install_line() -> None:
    docs = (REPO / "docs" / "workflow.md").read_text()
    launcher = (REPO / "scripts" / "launch_kda_kernel_task.sh").read_text()
    assert HUMANIZE_INSTALL in docs and HUMANIZE_INSTALL in launcher
    for text in (docs, launcher, (REPO / "kda_lab" / "doctor.py").read_text()):
        installs = set(re.findall(r"/plugin install [\w@.-]+", text))
        assert installs <= {"/plugin install humanize@PolyArch"}, installs


def test_nothing_cites_a_design_document_the_repository_does_not_have() -> None:
    for rel in tracked(REPO):
        if rel == "tests/test_self_contained.py" or not rel.endswith((".md", ".py", ".sh", ".toml", ".tmpl")):
            continue
        text = (REPO / rel).read_text(errors="replace")
        for cited in set(re.findall(r"\b([A-Z][A-Z_]+\.md)\b", text)):
            if cited in ("README.md",):
                continue
            assert list(REPO.rglob(cited)), f"{rel} cites {cited}, which is not in the repository"


def test_doctor_says_for_which_arch_rows_count() -> None:
    assert "count for h200" in rows_count_for(["h200"])[2]
    assert "no arch" in rows_count_for([])[2]
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU host: the CPU line is not printed")
    r = subprocess.run([sys.executable, "-m", "kda_lab", "doctor"], cwd=REPO, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and "rows count for no arch" in r.stdout, r.stdout


def test_the_launcher_numbers_doc_says_what_order_txt_says() -> None:
    docs = (REPO / "docs" / "workflow.md").read_text()
    order = (REPO / "scripts" / "launch_kernels" / "order.txt").read_text().split()
    rows = re.findall(r"^\| k(\d\d) \| `([^`]+)` \|", docs, flags=re.M)
    assert rows and all(order[int(n) - 1] == slug for n, slug in rows), rows
    examples = re.findall(r"\bk(\d\d) is\s+`([^`]+)`", docs)  # the prose's examples
    assert examples and all(order[int(n) - 1] == slug for n, slug in examples), examples
    assert "k19, k20" not in docs and "scripts/launch_kernels/order.txt" in docs


def test_adding_to_the_lab_documents_commands_that_parse() -> None:
    docs = (REPO / "docs" / "workflow.md").read_text()
    section = docs.split("## Adding to the lab", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"^ {4}(kda .+)$", section, flags=re.M)
    # a task, its twin on the other GPU (rows_from), a family, a fast path
    assert [c.split()[1] for c in commands] == ["new-task", "new-task", "new-family", "new-family"]
    for c in commands:
        build_parser().parse_args(shlex.split(c)[1:])  # SystemExit on a command the CLI does not take
    for rel in ("kda_lab/families/<family>.py", "kda_kernels/registry.py", "kda_kernels/contracts.py",
                "kda_lab/families/__init__.py", "kda_kernels/diffusion/<family>/__init__.py",
                "tests/families/test_<family>.py", "scripts/launch_kernels/order.txt"):
        assert rel in section, rel


STUB = (REPO / "kda_lab" / "task" / "templates" / "task" / "tests" / "test_correctness.py").read_text()


def test_every_task_stub_is_the_plugins_class() -> None:
    stubs = sorted((REPO / "kernels").glob("*/tests/test_correctness.py"))
    assert len(stubs) == len(list((REPO / "kernels").glob("*/task.toml")))
    assert all(p.read_text() == STUB for p in stubs)
    assert "globals().update" not in STUB and "class TestTask(TaskTests)" in STUB


def collected(task: str) -> list[str]:
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                        f"kernels/{task}/tests/test_correctness.py"], cwd=REPO, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return [line.split("::", 1)[1] for line in r.stdout.splitlines() if "::" in line]


def test_the_plugin_parametrizes_a_task_stub_over_its_rows() -> None:
    from kda_lab.task import load_task

    task = load_task("h200_diffusion_fuse_scale_shift__multi_shape")
    tiny = {w.name for w in task.workloads if "tiny" in w.tags}
    items = collected(task.slug)
    interp = {i for i in items if "in_interpreter" in i}
    assert interp == {f"TestTask::test_candidate_and_sglang_in_interpreter[{d}-{r}]"
                      for d in ("float32", "float16") for r in tiny}
    assert {i for i in items if "on_gpu" in i} == {f"TestTask::test_candidate_on_gpu[{w.name}]"
                                                   for w in task.workloads}
    assert "TestTask::test_task_folder_is_valid" in items
    # a task without tiny rows gets no interpreter test at all (not one skipped for an empty set)
    assert not [i for i in collected("h200_fa4_mha__bf16_head128_total32768") if "in_interpreter" in i]
