"""``kda export --regen-patch``: ``patches/sglang_kda_kernels.patch``, the block appended to SGLang's
``python/sglang/__init__.py`` that installs the overlay, rendered against the pinned release's file (or a
checkout's). patches/README.md says how to apply it."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from importlib import metadata
from pathlib import Path

from kda_kernels.registry import SGLANG_VERSION
from kda_lab.export import Refusal

PATCH_REL = Path("patches/sglang_kda_kernels.patch")
SGLANG_INIT_REL = "python/sglang/__init__.py"
# sha256 of sglang/__init__.py in the sglang==0.5.23 wheel (== python/sglang/__init__.py at tag v0.5.23)
SGLANG_INIT_SHA256 = "0c6bd1b5bc75da013d49d26f7799ca36d682779293405dce1adc193b97a0e6bd"


PATCH_BLOCK = '''

# >>> kda_kernels overlay (KDA Lab patches/sglang_kda_kernels.patch) >>>
# Swaps promoted KDA kernels into SGLang's diffusion call sites. Inspect: kda_kernels.status();
# undo at runtime: kda_kernels.uninstall(); skip: KDA_KERNELS_DISABLE=1; remove: git apply -R.
# Never raises (not even under `python -W error`): problems go to the "kda_kernels" logger and status().
def _kda_kernels_install() -> None:
    import logging

    log = logging.getLogger("kda_kernels")
    try:
        import kda_kernels
    except ModuleNotFoundError as e:
        if e.name == "kda_kernels":  # the overlay is not installed: SGLang as released
            return
        log.warning("kda_kernels failed to import; SGLang kernels unchanged: %r", e)
        return
    except Exception as e:  # a broken overlay must never break `import sglang`
        log.warning("kda_kernels failed to import; SGLang kernels unchanged: %r", e)
        return
    try:
        kda_kernels.install(defer=True)  # each swap waits for SGLang to import its module
    except Exception as e:  # install() never raises; this is the last line of defence
        log.warning("kda_kernels.install() failed; SGLang kernels unchanged: %r", e)


_kda_kernels_install()
del _kda_kernels_install
# <<< kda_kernels overlay <<<
'''


def render_patch(init_text: str, rel: str = SGLANG_INIT_REL) -> str:
    """A `git apply`-able patch appending PATCH_BLOCK to ``init_text`` (pure append, 3 lines of context)."""
    if "kda_kernels" in init_text:
        raise Refusal(f"{rel} already contains the kda_kernels block (patch a clean file)")
    old = init_text.splitlines(keepends=True)
    add = PATCH_BLOCK.splitlines(keepends=True)
    ctx = old[-3:]
    start = len(old) - len(ctx) + 1 if old else 0
    body: list[str] = []
    if old and not old[-1].endswith("\n"):
        body += [" " + line for line in ctx[:-1]]
        body += ["-" + ctx[-1] + "\n", "\\ No newline at end of file\n", "+" + ctx[-1] + "\n"]
    else:
        body += [" " + line for line in ctx]
    body += ["+" + line for line in add]
    return "".join([
        f"diff --git a/{rel} b/{rel}\n",
        f"--- a/{rel}\n",
        f"+++ b/{rel}\n",
        f"@@ -{start},{len(ctx)} +{start if old else 1},{len(ctx) + len(add)} @@\n",
        *body,
    ])


def pinned_release_init(wheel: Path | None = None) -> tuple[str, str]:
    """sglang/__init__.py of the sglang==0.5.23 release: from a wheel, else the installed distribution
    (verified against its RECORD hash, which is the wheel's). Returns (text, where)."""
    if wheel is not None:
        with zipfile.ZipFile(wheel) as z:
            data = z.read("sglang/__init__.py")
        where = f"{wheel}!sglang/__init__.py"
    else:
        try:
            dist = metadata.distribution("sglang")
        except metadata.PackageNotFoundError as e:
            raise Refusal("sglang is not installed; pass --wheel (pip download --no-deps "
                          f"sglang=={SGLANG_VERSION} -d /tmp/w) or --sglang-init") from e
        if dist.version != SGLANG_VERSION:
            raise Refusal(f"installed sglang is {dist.version}, not the pin {SGLANG_VERSION}; pass --wheel")
        record = next((f for f in dist.files or () if f.as_posix() == "sglang/__init__.py"), None)
        if record is None:
            raise Refusal("installed sglang has no sglang/__init__.py in its RECORD")
        data = Path(dist.locate_file(record)).read_bytes()
        if record.hash is not None:
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            if digest != record.hash.value:
                raise Refusal(f"{dist.locate_file(record)} differs from the released file (RECORD hash); "
                              "pass --wheel")
        where = str(dist.locate_file(record))
    got = hashlib.sha256(data).hexdigest()
    if got != SGLANG_INIT_SHA256:
        raise Refusal(f"{where}: sha256 {got} is not sglang {SGLANG_VERSION}'s ({SGLANG_INIT_SHA256})")
    return data.decode(), where


def regen_patch(root: Path, sglang_init: Path | None, wheel: Path | None, out_path: Path | None,
                out=print) -> int:
    if sglang_init is not None:
        p = sglang_init / SGLANG_INIT_REL if sglang_init.is_dir() else sglang_init
        if not p.exists():
            raise Refusal(f"{p} does not exist (give an SGLang checkout or its python/sglang/__init__.py)")
        text, where = p.read_text(), str(p)
    else:
        text, where = pinned_release_init(wheel)
    dest = out_path or root / PATCH_REL
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(render_patch(text))
    out(f"wrote {dest} against {where}")
    return 0
