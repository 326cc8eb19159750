"""Every stage draws from its own RNG stream, swapped in for its actions: the draws are the same
whether each action swaps in and out or a run of actions keeps the stream installed
(``keep_stage_rng``, what the executor does), and the process's own stream is untouched."""

from __future__ import annotations

import torch
from torch import nn

from suite.pipeline.boundary import derive_seed
from suite.pipeline.stage import Stage, keep_stage_rng
from suite.pipeline.timing import Clock

SEED = 7
ORDER = ["a", "a", "b", "a", "b", "b", "a"]  # which stage acts, in turn


def _stages() -> dict[str, Stage]:
    cpu = torch.device("cpu")
    return {
        name: Stage(i, 2, nn.Identity(), None, cpu, Clock(cpu), 1, SEED)  # type: ignore[arg-type]
        for i, name in enumerate("ab")
    }


def _expected() -> dict[str, list[torch.Tensor]]:
    gens = {name: torch.Generator().manual_seed(derive_seed(SEED, "stage", i)) for i, name in enumerate("ab")}
    return {name: [torch.rand(3, generator=gens[name]) for n in ORDER if n == name] for name in "ab"}


def _act(stages: dict[str, Stage], keep: bool) -> dict[str, list[torch.Tensor]]:
    got: dict[str, list[torch.Tensor]] = {"a": [], "b": []}
    with keep_stage_rng() if keep else _nothing():
        for name in ORDER:
            with stages[name].own_rng(f"F{len(got[name])}"):
                got[name].append(torch.rand(3))
            assert stages[name].clock.action is None
    return got


class _nothing:  # noqa: N801
    def __enter__(self) -> None: ...

    def __exit__(self, *exc: object) -> None: ...


def test_stage_streams_are_the_same_with_and_without_keeping_them_installed():
    want = _expected()
    for keep in (False, True):
        torch.manual_seed(123)
        outer = torch.get_rng_state()
        got = _act(_stages(), keep)
        assert torch.equal(torch.get_rng_state(), outer)  # the process's stream: no draw, restored
        for name in "ab":
            assert all(torch.equal(x, y) for x, y in zip(got[name], want[name], strict=True)), (keep, name)


def test_nested_blocks_give_the_enclosing_stage_its_stream_back():
    stages = _stages()
    want = _expected()
    torch.manual_seed(5)
    outer = torch.get_rng_state()
    for keep in (False, True):
        st = _stages() if keep else stages
        with keep_stage_rng() if keep else _nothing():
            with st["a"].own_rng():
                first = torch.rand(3)
                with st["b"].own_rng():
                    b = torch.rand(3)
                second = torch.rand(3)
        assert torch.equal(first, want["a"][0]) and torch.equal(second, want["a"][1]) and torch.equal(b, want["b"][0])
        assert torch.equal(torch.get_rng_state(), outer)
