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
other stages or not.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Protocol

import torch
from torch import Tensor, nn

from tasks import Batch, Task, autocast

from .boundary import Micro, Received, ReceiverEnd, SenderEnd, Sent, derive_seed
from .timing import Clock

__all__ = ["Stage", "GradSync", "NoSync"]


class GradSync(Protocol):
    """How a stage's gradients are synchronized across data-parallel replicas."""

    def forward(self) -> Any: ...  # context for every forward
    def backward(self, last: bool) -> Any: ...  # context for a backward (last: reduce now)
    def after_backward(self, extra_params: list[nn.Parameter]) -> None: ...


class NoSync:
    """Single replica: nothing to synchronize."""

    @contextmanager
    def forward(self) -> Iterator[None]:
        yield

    @contextmanager
    def backward(self, last: bool) -> Iterator[None]:
        yield

    def after_backward(self, extra_params: list[nn.Parameter]) -> None:
        pass


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
        self.optimizer: torch.optim.Optimizer | None = None
        self.scheduler: Any = None
        self.step_losses: list[Tensor] = []  # last stage: unscaled loss of each micro-batch
        self._saved: dict[int, tuple[Any, Received | None]] = {}
        self._backwards = 0  # backwards run this step: the M-th one reduces data-parallel gradients
        self._rng = self._init_rng(derive_seed(seed, "stage", index))

    # --- parameters ----------------------------------------------------------------------
    def compressor_parameters(self) -> list[nn.Parameter]:
        ends = [e for e in (self.upstream, self.downstream) if e is not None]
        return [p for e in ends for p in e.parameters()]

    def parameters(self) -> list[nn.Parameter]:
        return list(self.module.parameters()) + self.compressor_parameters()

    def compressors(self) -> list[Any]:
        ends = [e for e in (self.upstream, self.downstream) if e is not None]
        return [c for e in ends for c in e.compressors()]

    # --- RNG: one stream per stage -----------------------------------------------------
    def _init_rng(self, seed: int) -> dict[str, Tensor]:
        state = {"cpu": torch.Generator().manual_seed(seed).get_state()}
        if self.device.type == "cuda":
            outer = torch.cuda.get_rng_state(self.device)
            torch.cuda.manual_seed(seed)
            state["cuda"] = torch.cuda.get_rng_state(self.device)
            torch.cuda.set_rng_state(outer, self.device)
        return state

    @contextmanager
    def own_rng(self) -> Iterator[None]:
        outer = torch.get_rng_state()
        torch.set_rng_state(self._rng["cpu"])
        if "cuda" in self._rng:
            outer_cuda = torch.cuda.get_rng_state(self.device)
            torch.cuda.set_rng_state(self._rng["cuda"], self.device)
        try:
            yield
        finally:
            self._rng["cpu"] = torch.get_rng_state()
            torch.set_rng_state(outer)
            if "cuda" in self._rng:
                self._rng["cuda"] = torch.cuda.get_rng_state(self.device)
                torch.cuda.set_rng_state(outer_cuda, self.device)

    # --- schedule actions --------------------------------------------------------------------
    @contextmanager
    def _action(self, label: str) -> Iterator[None]:
        """Charge the clock's sections to schedule action ``label`` (the network model's inputs)."""
        self.clock.action = label
        try:
            yield
        finally:
            self.clock.action = None

    def forward(self, m: int, batch: Batch, micro: Micro) -> None:
        """F(m): receive (or read) the input, run the module, send (or compute the loss)."""
        with self.own_rng(), self._action(f"F{m}"):
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
        with self.own_rng(), self._action(f"B{m}"):
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
