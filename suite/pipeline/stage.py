"""One pipeline stage executing schedule actions: forward, backward, evaluation, optimizer step.

A stage owns its module (possibly DDP-wrapped), the ends of the boundaries around it,
its optimizer and scheduler, its clock and its own RNG stream. ``forward(m)`` receives
micro-batch m's activation (stage 0 reads the batch), runs the module and sends the
result (the last stage computes the loss instead, scaled by 1/M). ``backward(m)``
receives the output gradient (the last stage starts from its loss), backpropagates, and
sends the input gradient. Parameter gradients accumulate over the M micro-batches and
``finish_step`` applies them.

Every stage draws random numbers (dropout) from its own generator state, swapped in for
each action, so a stage computes the same thing whether it shares a process with the
other stages or not. Inside ``keep_stage_rng`` (the executor's loop) a stage's state stays
installed from one of its actions to the next, which draws the same numbers with fewer swaps.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, ContextManager, Protocol

import torch
from torch import Tensor, nn

from tasks import Batch, Task, autocast

from .boundary import Micro, Received, ReceiverEnd, SenderEnd, Sent, derive_seed
from .timing import Clock

__all__ = ["Stage", "GradSync", "NoSync", "keep_stage_rng"]


class GradSync(Protocol):
    """How a stage's gradients are synchronized across data-parallel replicas."""

    def forward(self) -> Any: ...  # context for every forward
    def backward(self, last: bool) -> Any: ...  # context for a backward (last: reduce now)
    def after_backward(self, extra_params: list[nn.Parameter]) -> None: ...


_NOTHING = nullcontext()


class NoSync:
    """Single replica: nothing to synchronize."""

    def forward(self) -> ContextManager[None]:
        return _NOTHING

    def backward(self, last: bool) -> ContextManager[None]:
        return _NOTHING

    def after_backward(self, extra_params: list[nn.Parameter]) -> None:
        pass


class _RngHolder:
    """Whose RNG state the process's generators hold (one per process): ``stage`` (None: the
    process's own, ``outer``). Inside :func:`keep_stage_rng` a stage's state stays installed
    from one of its actions to the next, so that a run of actions costs one swap in and one
    out instead of two per action; it is swapped out as soon as another stage acts and when
    the region ends. Between the actions of that region only the executor runs, which draws
    no random numbers, so every stream sees the same draws as with a swap per action."""

    def __init__(self) -> None:
        self.stage: Stage | None = None
        self.outer: dict[str, Tensor] = {}
        self.depth = 0  # open own_rng blocks
        self.keep = 0  # open keep_stage_rng regions

    def install(self, st: Stage | None) -> None:
        held = self.stage
        if held is st:
            return
        if held is None:  # the process's own state, restored by install(None)
            self.outer["cpu"] = torch.get_rng_state()
            if "cuda" in st._rng:  # type: ignore[union-attr]
                self.outer["cuda"] = torch.cuda.get_rng_state(st.device)  # type: ignore[union-attr]
        else:  # the stage that held it gets its advanced state back
            held._rng["cpu"] = torch.get_rng_state()
            if "cuda" in held._rng:
                held._rng["cuda"] = torch.cuda.get_rng_state(held.device)
        if st is None:
            torch.set_rng_state(self.outer.pop("cpu"))
            if "cuda" in self.outer:
                torch.cuda.set_rng_state(self.outer.pop("cuda"), held.device)  # type: ignore[union-attr]
        else:
            torch.set_rng_state(st._rng["cpu"])
            if "cuda" in st._rng:
                torch.cuda.set_rng_state(st._rng["cuda"], st.device)
        self.stage = st


_RNG = _RngHolder()


class keep_stage_rng:  # noqa: N801 - used like a function: ``with keep_stage_rng():``
    """Keep a stage's RNG state installed between its actions in this block (see _RngHolder)."""

    def __enter__(self) -> None:
        _RNG.keep += 1

    def __exit__(self, *exc: object) -> None:
        _RNG.keep -= 1
        if not _RNG.keep and not _RNG.depth:
            _RNG.install(None)


class _Acting:
    """What :meth:`Stage.own_rng` returns (a class: cheaper than a generator context manager,
    and entered twice per micro-batch and stage)."""

    __slots__ = ("stage", "action", "previous")

    def __init__(self, stage: Stage, action: str | None) -> None:
        self.stage, self.action = stage, action

    def __enter__(self) -> None:
        self.previous = _RNG.stage
        _RNG.install(self.stage)
        _RNG.depth += 1
        if self.action is not None:
            self.stage.clock.action = self.action

    def __exit__(self, *exc: object) -> None:
        if self.action is not None:
            self.stage.clock.action = None
        _RNG.depth -= 1
        if _RNG.depth:  # nested in another stage's block: give that one its stream back
            _RNG.install(self.previous)
        elif not _RNG.keep:
            _RNG.install(None)


class Stage:
    """Stage ``index`` of ``n_stages``; see the module docstring."""

    def __init__(
        self,
        index: int,
        n_stages: int,
        module: nn.Module,
        task: Task,
        device: torch.device,
        clock: Clock,
        microbatches: int,
        seed: int,
        upstream: ReceiverEnd | None = None,
        downstream: SenderEnd | None = None,
        train_module: nn.Module | None = None,
        sync: GradSync | None = None,
        autocast_dtype: torch.dtype | None = None,
        tp: Any = None,
    ) -> None:
        self.index = index
        self.is_last = index == n_stages - 1
        self.module = module  # plain module (evaluation)
        self.train_module = train_module if train_module is not None else module  # DDP wrapper if any
        self.task = task
        self.device = device
        self.clock = clock
        self.microbatches = microbatches
        self.upstream = upstream
        self.downstream = downstream
        self.sync = sync or NoSync()
        self.autocast_dtype = autocast_dtype  # bf16 tiers: forward + loss under torch.autocast
        self.tp = tp  # TPGroup of this stage's tensor-parallel reductions (tp > 1), told each micro-batch
        self.optimizer: torch.optim.Optimizer | None = None
        # > 0: the gradient's global 2-norm is clipped to it before each step (suite.pipeline.optimizer)
        self.clip_norm = 0.0
        self.scheduler: Any = None
        self.step_losses: list[Tensor] = []  # last stage: unscaled loss of each micro-batch
        self._saved: dict[int, tuple[Any, Received | None]] = {}
        self._backwards = 0  # backwards run this step: the M-th one reduces data-parallel gradients
        self._rng = self._init_rng(derive_seed(seed, "stage", index))

    # --- parameters ----------------------------------------------------------------------
    def compressor_parameters(self) -> list[nn.Parameter]:
        ends = [e for e in (self.upstream, self.downstream) if e is not None]
        return [p for e in ends for p in e.parameters()] + (self.tp.parameters() if self.tp is not None else [])

    def parameters(self) -> list[nn.Parameter]:
        return list(self.module.parameters()) + self.compressor_parameters()

    def compressors(self) -> list[Any]:
        ends = [e for e in (self.upstream, self.downstream) if e is not None]
        return [c for e in ends for c in e.compressors()] + (self.tp.compressors() if self.tp is not None else [])

    # --- RNG: one stream per stage -----------------------------------------------------
    def _init_rng(self, seed: int) -> dict[str, Tensor]:
        state = {"cpu": torch.Generator().manual_seed(seed).get_state()}
        if self.device.type == "cuda":
            outer = torch.cuda.get_rng_state(self.device)
            torch.cuda.manual_seed(seed)
            state["cuda"] = torch.cuda.get_rng_state(self.device)
            torch.cuda.set_rng_state(outer, self.device)
        return state

    def own_rng(self, action: str | None = None) -> _Acting:
        """``with stage.own_rng():`` runs the block on this stage's RNG stream (CPU, and CUDA on a
        GPU), restoring the process's afterwards; ``action`` also charges the clock's sections
        in the block to that schedule action (``F3``: the network model's inputs)."""
        return _Acting(self, action)

    def forward(self, m: int, batch: Batch, micro: Micro) -> None:
        """F(m): receive (or read) the input, run the module, send (or compute the loss)."""
        with self.own_rng(f"F{m}"):
            if self.tp is not None:
                self.tp.micro = micro
            if self.upstream is not None:
                x, received = self.upstream.receive_activation(micro)
            else:
                x, received = batch.inputs, None
            with self.clock.section("compute"), self.sync.forward(), autocast(self.device, self.autocast_dtype):
                y = self.train_module(x, batch.inputs)
                if self.is_last:
                    loss = self.task.loss(y, batch.targets)
                    self.step_losses.append(loss.detach())
                    out: Any = loss / self.microbatches
            if not self.is_last:
                assert self.downstream is not None
                out = self.downstream.send_activation(y, micro)
            self._saved[m] = (out, received)

    def backward(self, m: int, micro: Micro) -> None:
        """B(m): receive the output gradient (or start from the loss), backpropagate, send."""
        out, received = self._saved.pop(m)
        with self.own_rng(f"B{m}"):
            if self.is_last:
                roots, grads = (out,), None
            else:
                assert self.downstream is not None and isinstance(out, Sent)
                roots, grads = self.downstream.receive_gradient(out, micro)
            self._backwards += 1
            with self.clock.section("compute"), self.sync.backward(last=self._backwards == self.microbatches):
                if roots:
                    torch.autograd.backward(roots, grads)
            if received is not None:
                assert self.upstream is not None
                self.upstream.send_gradient(received, micro)

    def finish_step(self) -> None:
        """Synchronize extra gradients, apply the optimizer and scheduler, clear gradients."""
        if self._saved:
            raise RuntimeError(f"stage {self.index}: micro-batches {sorted(self._saved)} were not backpropagated")
        self._backwards = 0
        self.sync.after_backward(self.compressor_parameters())
        assert self.optimizer is not None
        with self.clock.section("optimizer"):
            if self.clip_norm > 0:
                torch.nn.utils.clip_grad_norm_(self.parameters(), self.clip_norm)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            if self.scheduler is not None:
                self.scheduler.step()

    def take_loss(self) -> float | None:
        """Mean unscaled loss of this step's micro-batches (last stage only)."""
        if not self.step_losses:
            return None
        loss = float(torch.stack(self.step_losses).mean())
        self.step_losses.clear()
        return loss

    @torch.no_grad()
    def eval_forward(self, batch: Batch, micro: Micro) -> tuple[float, float] | None:
        """Forward one evaluation batch; the last stage returns the metric's (sum, count)."""
        with self.own_rng():
            if self.tp is not None:
                self.tp.micro = micro
            if self.upstream is not None:
                x, _ = self.upstream.receive_activation(micro)
            else:
                x = batch.inputs
            with autocast(self.device, self.autocast_dtype):
                y = self.module(x, batch.inputs)
                if self.is_last:
                    return self.task.metric_sums(y, batch.targets)
            assert self.downstream is not None
            self.downstream.send_activation(y, micro)
            return None
