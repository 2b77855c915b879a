"""kda_lab.interpret.offline_launch.assert_kept_repeat, the check the Triton tasks' kept-launch tests share: it
passes a kept launch that repeats Triton's dispatch and rejects each way a repeat can differ."""

from __future__ import annotations

import copy

import pytest

from kda_lab.interpret.offline_launch import assert_kept_repeat

FIRST = {"grid": [57, 1, 1], "stream": 1234, "function": 7, "packed": "(4, 1, 1)",
         "hooks": ["HookChain", "HookChain"], "meta": True, "args": ["100", "200", "300", "400", "19", "3072"]}
SECOND = {**FIRST, "hooks": ["NoneType", "NoneType"], "meta": False, "args": ["100", "200", "300", "999", "19", "3072"]}


def test_a_faithful_repeat_passes() -> None:
    assert_kept_repeat(FIRST, SECOND, [3])  # only the fresh output in slot 3 differs


@pytest.mark.parametrize("edit", [
    lambda s: s.update(grid=[58, 1, 1]),
    lambda s: s.update(packed="(8, 1, 1)"),
    lambda s: s.update(hooks=["HookChain", "HookChain"]),  # a kept launch with no hook registered passes None
    lambda s: s.update(meta=True),
    lambda s: s["args"].__setitem__(4, "20"),  # a trailing (non-output) argument changed
    lambda s: s["args"].append("1"),
], ids=["grid", "packed", "hooks", "meta", "arg", "arity"])
def test_each_difference_is_rejected(edit) -> None:
    second = copy.deepcopy(SECOND)
    edit(second)
    with pytest.raises(AssertionError):
        assert_kept_repeat(FIRST, second, [3])
    with pytest.raises(AssertionError):
        assert_kept_repeat(FIRST, SECOND, [])  # the output slot itself is not excused
