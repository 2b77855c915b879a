"""A launched task worktree is a complete, truthful place for a kernel agent (issue: launched worktree).

On a fresh copy of this repository (its tracked and untracked-not-ignored files, committed in a new repo):
- the launcher makes the worktree runnable: `.venv/bin/kda validate TASK` passes there, with the worktree's own
  kda_lab, and `kda check TASK --interpret` reports the candidate's verdict per row;
- every task's draft is true: each `kda ...` command it shows parses with the real CLI, each repository file it
  names exists in the worktree, it names interface.md, and it makes none of the claims the code does not back.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kda_lab.cli import build_parser

pytestmark = pytest.mark.slow  # launches real worktrees: started first (conftest.py)

REPO = Path(__file__).resolve().parents[1]
FSS = "h200_diffusion_fuse_scale_shift__multi_shape"
DRAFT = ".humanize/kernel-agent/draft.md"
# Claims earlier drafts made that no command backs (the check runs the task.toml rows; nothing is cloned
# "clone for clone" in the draft's sense).
FALSE_CLAIMS = ("random shapes beyond the production table", "clone for clone")
TASK_COMMANDS = {"check", "bench", "profile"}
PATH_RE = re.compile(r"(?<![\w/.-])((?:docs|scripts|kda_lab|kda_kernels|kernels|patches|requirements|tests)"
                     r"/[\w./<>-]*\w)")


def fresh_repo(tmp: Path) -> Path:
    """This checkout's files as a new repository with one commit on main (no ignored files, no .venv)."""
    repo = tmp / "repo"
    files = subprocess.run(["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard", "-z"],
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for rel in filter(None, files):
        src = REPO / rel
        if src.is_file():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, repo / rel)
    env = git_env(tmp)
    for cmd in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "fresh clone"]):
        subprocess.run(["git", "-C", str(repo), *cmd], check=True, env=env, capture_output=True)
    return repo


def git_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KDA_", "GIT_", "CLAUDE"))}
    env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t",
               GIT_CONFIG_NOSYSTEM="1", KDA_WORKTREE_BASE=str(tmp / "wt"), KDA_NO_CLAUDE="1",
               KDA_PYTHON=sys.executable)
    env.pop("TRITON_INTERPRET", None)
    return env


def launch(repo: Path, slug: str, run_id: str, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], Path]:
    r = subprocess.run(["scripts/launch_kda_kernel_task.sh", f"kernels/{slug}"], cwd=repo,
                       env={**env, "KDA_RUN_ID": run_id}, capture_output=True, text=True, timeout=300)
    return r, env_path(env) / f"{slug}-{run_id}"


def env_path(env: dict[str, str]) -> Path:
    return Path(env["KDA_WORKTREE_BASE"])


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fresh_repo(tmp_path_factory.mktemp("fresh"))


def test_launched_worktree_runs_its_own_lab(repo: Path) -> None:
    env = git_env(repo.parent)
    r, wt = launch(repo, FSS, "venv", env)
    assert r.returncode == 0, r.stderr
    assert f"kda validate {FSS}: ok" in r.stdout
    run_env = {k: v for k, v in env.items() if k != "KDA_PYTHON"}
    out = subprocess.run([".venv/bin/python", "-c", "import kda_lab; print(kda_lab.__file__)"], cwd=wt,
                         env=run_env, capture_output=True, text=True, check=True).stdout
    assert Path(out.strip()).resolve() == (wt / "kda_lab" / "__init__.py").resolve()  # the worktree's lab
    v = subprocess.run([".venv/bin/kda", "validate", FSS], cwd=wt, env=run_env, capture_output=True, text=True)
    assert v.returncode == 0 and f"ok      {FSS}" in v.stdout, v.stdout + v.stderr
    c = subprocess.run([".venv/bin/kda", "check", FSS, "--interpret", "--no-record", "--dtypes", "float32",
                        "--seeds", "1"], cwd=wt, env=run_env, capture_output=True, text=True, timeout=600)
    assert c.returncode == 0, c.stdout[-3000:] + c.stderr[-3000:]
    assert "test_ln_select01_tail_affine [float32] seed 0: ok" in c.stdout
    assert "CPU interpreter verdict PASSED" in c.stdout
    assert f"PATH={wt.resolve()}/.venv/bin:$PATH" in r.stdout or f"PATH={wt}/.venv/bin:$PATH" in r.stdout
    # the README's test command's tools: the linters, and pytest collecting the worktree's own tests
    for tool in ("ruff", "shellcheck"):
        t = subprocess.run([f".venv/bin/{tool}", "--version"], cwd=wt, env=run_env, capture_output=True, text=True)
        assert t.returncode == 0, (tool, t.stderr)
    if (Path(sys.executable).parent.parent / "e2e-site").is_dir():  # kda e2e's deps (scripts/setup_env.sh)
        assert (wt / ".venv" / "e2e-site").resolve() == (Path(sys.executable).parent.parent / "e2e-site").resolve()
    marker = wt / "tests" / "test_worktree_marker.py"
    marker.write_text("def test_marker():\n    import kda_lab, pathlib\n"
                      f"    assert pathlib.Path(kda_lab.__file__).resolve().parent == pathlib.Path({str(wt.resolve() / 'kda_lab')!r})\n")
    p = subprocess.run([".venv/bin/pytest", "-q", "-p", "no:cacheprovider", str(marker)], cwd=wt, env=run_env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "1 passed" in p.stdout, p.stdout[-2000:] + p.stderr[-2000:]
    marker.unlink()


def kda_commands(text: str, slug: str) -> list[str]:
    """Every `kda ...` command the draft shows: backtick spans and indented command lines (comments dropped)."""
    found = re.findall(r"`(kda [^`]+)`", text)
    found += [line.split("#", 1)[0].strip() for line in text.splitlines() if re.match(r"\s{4,}kda \w", line)]
    return [c.replace("<task>", slug).replace("TASK", slug) for c in found]


def parses(command: str, slug: str) -> str:
    """'' when the command parses with the real CLI (a task command mentioned without its task gets the slug)."""
    argv = shlex.split(command)[1:]
    if "<" in command:  # another placeholder (e.g. <row>): parse what is concrete
        argv = [a if "<" not in a else "x" for a in argv]
    if argv and argv[0] in TASK_COMMANDS and (len(argv) == 1 or argv[1].startswith("-")):
        argv.insert(1, slug)
    try:
        build_parser().parse_args(argv)
    except SystemExit:
        return f"does not parse: {command!r}"
    return ""


def slugs() -> list[str]:
    return sorted(p.parent.name for p in (REPO / "kernels").glob("*/task.toml"))


def test_every_tasks_draft_is_true(repo: Path) -> None:
    env = {**git_env(repo.parent), "KDA_NO_VENV": "1"}
    problems: list[str] = []
    for slug in slugs():
        r, wt = launch(repo, slug, "draft", env)
        assert r.returncode == 0, r.stderr
        text = (wt / DRAFT).read_text()
        if f"kernels/{slug}/interface.md" not in text:
            problems.append(f"{slug}: the draft does not name interface.md")
        problems += [f"{slug}: {p}" for c in kda_commands(text, slug) if (p := parses(c, slug))]
        for rel in set(PATH_RE.findall(text)):
            rel = rel.replace("<task>", slug).rstrip(".")
            if "<" in rel or "*" in rel or re.match(r"kernels/(?!h200_|b200_)", rel):
                continue  # a pattern, or a path inside SGLang's package (sglang/kernels/ops/...)
            if not (wt / rel).exists():
                problems.append(f"{slug}: names {rel}, which the worktree does not have")
        problems += [f"{slug}: claims {c!r}" for c in FALSE_CLAIMS if c in text]
        if "scripts/setup_env.sh" not in text:  # KDA_NO_VENV: the draft says how to get an environment
            problems.append(f"{slug}: no setup line for a worktree without .venv")
    assert problems == []


def test_the_checker_rejects_a_false_draft() -> None:
    slug = FSS
    assert parses("kda check --no-such-flag", slug)
    assert parses("kda bench --aa --baseline-only", slug)  # mutually exclusive
    assert not parses("kda check --interpret", slug)
    assert kda_commands("    kda bench <task> --aa   # noise\n`kda doctor`", slug) == ["kda doctor", f"kda bench {slug} --aa"]
    assert PATH_RE.findall("see docs/no-such.md and scripts/gpu_box.sh.") == ["docs/no-such.md", "scripts/gpu_box.sh"]


def test_readme_quickstart_runs_on_a_fresh_clone(repo: Path) -> None:
    """README's first command, `./scripts/quickstart.sh`, as a new user runs it after setting up once: the fresh
    repository's .venv is this test's environment (scripts/setup_env.sh finds its stamp current and installs
    nothing; CI's own run of scripts/test.sh builds .venv from nothing), and the fresh repository's kda_lab is the
    one imported. It lists the tasks, validates them, gives the default task's CPU interpreter verdict and, on a
    CPU host, records nothing."""
    venv = Path(sys.prefix)
    if not (venv / ".kda-env-stamp").is_file():
        pytest.fail(f"{venv} is not a venv made by scripts/setup_env.sh (no .kda-env-stamp): run the README's "
                    "test command, which makes one")
    # setup_env.sh reinstalls when the stamp is stale, and through the link it would install into this test's
    # own environment (its editable kda_lab then pointing at this temporary clone): refuse that up front
    want = hashlib.sha256(b"".join((repo / f).read_bytes() for f in (
        "requirements/cpu.txt", "requirements/e2e-cpu.txt", "requirements/sglang.txt",
        "requirements/peers-cpu.txt", "pyproject.toml"))).hexdigest()
    if (venv / ".kda-env-stamp").read_text().strip() != want:
        pytest.fail(f"{venv} is stale against this checkout's pins: run scripts/setup_env.sh first (the quickstart "
                    "would reinstall into this environment)")
    (repo / ".venv").symlink_to(venv, target_is_directory=True)
    env = {**git_env(repo.parent), "PYTHONPATH": str(repo)}
    r = subprocess.run(["./scripts/quickstart.sh"], cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "environment ready" not in out, "setup_env.sh reinstalled: its stamp did not match this checkout"
    assert FSS in out and "no runs yet" not in out.split(FSS, 1)[1].split("\n", 1)[0]  # kda tasks, with its status
    assert f"ok      {FSS}" in out  # kda validate
    assert "CPU interpreter verdict PASSED" in out and "Traceback" not in out
    status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--", "kernels", "e2e"],
                            capture_output=True, text=True, check=True).stdout
    assert status == "", f"quickstart on a CPU host wrote to the ledgers: {status}"
