"""kda_kernels.prebuilt's shared impl-extension helper (source_digest, impl_extension, ExtensionSlot): it
names and configures exactly the extension each promoted CUDA task's register.py builds by hand today, so
their next revisions can import it; a changed header names a new extension; only the lab's copy builds on
first use."""

from __future__ import annotations

from pathlib import Path

import pytest

from kda_kernels.prebuilt import Extension, ExtensionSlot, builds_on_first_use, impl_extension, source_digest
from kda_lab.task import load_task
from kda_lab.task.schema import HASHED_HELPERS, load_candidate

# task -> the arguments that reproduce its register.py's EXTENSION
CASES = {
    "h200_diffusion_norm_infer__multi_shape": dict(
        prefix="onepass_rms", sources=("onepass_rms.cu", "onepass_binding.cpp"),
        headers=("onepass_contract.h", "onepass_launch.h")),
    "h200_diffusion_qknorm_rope__multi_shape": dict(
        prefix="qknorm_rope", sources=("qknorm_rope.cu", "qknorm_rope_binding.cpp"),
        headers=("qknorm_rope_core.cuh", "qknorm_rope_contract.h", "qknorm_rope_launch.h")),
    "h200_diffusion_group_norm_silu__multi_shape": dict(
        prefix="gns", std="c++17", with_names=False),  # sources and headers: its _SOURCES / _HEADERS
    "h200_diffusion_norm_scale_shift__multi_shape": dict(
        prefix="nss_host", sources=("nss_host.cpp",), headers=("nss_host_rules.h",), std="c++17",
        host_only=True),
}


def fields(ext: Extension) -> tuple:
    return (ext.name, ext.arch, ext.sources, ext.include_paths, ext.cflags, ext.cuda_cflags, ext.with_cuda)


@pytest.mark.parametrize("slug", sorted(CASES))
def test_the_helper_reproduces_each_promoted_extension(slug: str) -> None:
    module = load_candidate(load_task(slug))
    kw = dict(CASES[slug])
    if "sources" not in kw:
        kw.update(sources=module._SOURCES, headers=module._HEADERS)
    ours = impl_extension(module.__file__, arch="h200", **kw)
    assert fields(ours) == fields(module.EXTENSION)
    assert builds_on_first_use(module.__name__) == module._BUILD_ON_FIRST_USE is True


def test_a_changed_header_names_a_new_extension(tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text("// kernel\n")
    (tmp_path / "k.h").write_text("#define TILE 64\n")
    mod = str(tmp_path / "register.py")
    before = impl_extension(mod, "k", "b200", ("k.cu",), ("k.h",))
    assert before.cuda_cflags[-1] == "-gencode=arch=compute_100a,code=sm_100a"
    (tmp_path / "k.h").write_text("#define TILE 128\n")
    assert impl_extension(mod, "k", "b200", ("k.cu",), ("k.h",)).name != before.name
    assert source_digest(tmp_path, ("k.cu",)) != source_digest(tmp_path, ("k.cu",), with_names=False)
    with pytest.raises(ValueError, match="unknown arch"):
        impl_extension(mod, "k", "h100", ("k.cu",))


def test_an_exported_copy_never_builds_and_the_slot_loads_once(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    assert not builds_on_first_use("kda_kernels.diffusion.norm_infer._impls.h200.register")
    (tmp_path / "k.cpp").write_text("// host\n")
    ext = impl_extension(str(tmp_path / "register.py"), "k", "h200", ("k.cpp",), host_only=True)
    monkeypatch.setenv("KDA_KERNELS_CACHE", str(tmp_path / "cache"))
    slot = ExtensionSlot(ext, "kda_kernels.diffusion.x._impls.h200.register")
    assert not slot.build and not slot.tried
    assert slot.get() is None and slot.tried  # not built, and this (serving) copy may not build it
    assert "prebuilt" not in HASHED_HELPERS  # the helper is not part of any source hash
