"""Count FLOPs, boundary activations and parameters per pipeline stage (the model-size axis).

For each listed (task, tier, model size, stage count): build the task's stages (on the meta device
for a named size: nothing is allocated, so a 7B model costs seconds), take the tier's first
micro-batch from the task's own data, and run each stage's forward and backward under
``torch.utils.flop_counter.FlopCounterMode``, the stages chained as the pipeline chains them (the
first stage's input needs no gradient, every other stage's does). What is and is not counted:
``suite.results.model_sizes``, which also reads the result without torch.

Maintainers' command (writes ``suite/results/model_sizes.json`` with the torch version and
commit; needs the data sets, as the tasks read their vocabularies and batches from them)::

    python -m suite.pipeline.flops --write         # or --check: compare with the committed file
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from suite.results.model_sizes import MODEL_SIZES_FILE, SCHEMA, ModelCost, StageCost, load_model_costs
from tasks import build_task, get_task_class
from tasks.api import Task

__all__ = ["ENTRIES", "count", "count_all", "main"]

# (task, tier, model size, stages) counted (stages None: the task's default split): every CPU
# leaderboard task's tier model at each stage count the committed records use, and the named sizes
# of the GPT family (both tasks' model classes) and of ResNet-18 at the default split
ENTRIES: tuple[tuple[str, str, str | None, int | None], ...] = (
    ("cifar10", "quick", None, None),
    ("sst2", "quick", None, None),
    ("shakespeare", "quick", None, None),
    ("shakespeare", "quick", None, 1),  # data parallel, unsplit
    ("wikitext2", "quick", None, None),
    *((t, "quick", None, None) for t in ("cola", "mrpc", "rte", "stsb")),
    *((t, "plateau", None, None) for t in ("cifar10", "shakespeare", "sst2", "stsb")),
    ("shakespeare", "plateau", None, 1),
    *(("shakespeare", "quick", s, None) for s in get_task_class("shakespeare").model_sizes),
    *(("shakespeare", "quick", s, 1) for s in get_task_class("shakespeare").model_sizes),  # data parallel
    *(("wikitext2", "quick", s, None) for s in get_task_class("wikitext2").model_sizes),
    *(("cifar10", "quick", s, None) for s in get_task_class("cifar10").model_sizes),
)

COUNTED = (
    "torch.utils.flop_counter.FlopCounterMode over one micro-batch per stage: matmul, convolution and "
    "scaled-dot-product attention (full T x T, causal masking not discounted), forward and backward "
    "(the first stage computes no input gradient); element-wise ops, norms, softmax, embedding "
    "lookups, the loss and the optimizer not counted. Named sizes built on the meta device. Kernels: the ops "
    "dispatched in the same forward and backward, views, aliases and empty allocations left out."
)


@contextlib.contextmanager
def _no_data_dependent_masks() -> Iterator[None]:
    """Hugging Face's causal-mask builder looks for packed sequences in ``position_ids`` with a
    data-dependent ``.all()``, which a meta tensor cannot answer; the tasks' positions are always
    0..T-1 (no packing), so the answer is "none" and the mask is the same (SDPA's causal flag)."""
    try:
        import transformers.masking_utils as masking
    except ImportError:  # a task set without transformers: nothing to patch
        yield
        return
    own = masking.find_packed_sequence_indices
    masking.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        masking.find_packed_sequence_indices = own


_aten = torch.ops.aten
# ops that launch no kernel on an accelerator (besides every view op): metadata, aliasing, allocation
_FREE = {
    _aten.detach, _aten.alias, _aten._unsafe_view, _aten.empty, _aten.empty_like, _aten.empty_strided,
    _aten.new_empty, _aten.new_empty_strided, _aten.lift_fresh, _aten.lift_fresh_copy,
}  # fmt: skip


class KernelCounter(TorchDispatchMode):
    """Counts the dispatched ops that launch a kernel (what a kernel-launch floor multiplies)."""

    def __init__(self) -> None:
        super().__init__()
        self.kernels = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if not (getattr(func, "is_view", False) or func.overloadpacket in _FREE):
            self.kernels += 1
        return func(*args, **(kwargs or {}))


def _params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def count(task: Task, n_stages: int | None = None, *, meta: bool | None = None) -> ModelCost:
    """One (task, stage count) counted: the task as built (its tier and model size), one micro-batch
    of its tier. ``meta`` None: on the meta device for a named size, on the CPU otherwise."""
    S = n_stages or task.default_stages
    on_meta = task.model_size is not None if meta is None else meta
    M = task.budget.microbatches
    batch = next(iter(task.train_batches())).split(M)[0]  # the tier's first micro-batch, real data
    device = torch.device("meta" if on_meta else "cpu")
    torch.manual_seed(task.seed)
    with device if on_meta else contextlib.nullcontext(), _no_data_dependent_masks():
        stages = task.build_stages(S)
        for m in stages:
            m.train()
        ids = batch.inputs.to(device)
        x, rows, dtype = ids, [], "float32"
        for i, stage in enumerate(stages):
            xin = x if i == 0 else x.detach().requires_grad_(True)
            with FlopCounterMode(display=False) as fwd, KernelCounter() as fwd_k:
                y = stage(xin, ids)
            grad = torch.ones_like(y)
            with FlopCounterMode(display=False) as bwd, KernelCounter() as bwd_k:
                y.backward(grad)
            last = i == S - 1
            if not last:
                dtype = str(y.dtype).removeprefix("torch.")  # what crosses the boundaries
            rows.append(
                StageCost(
                    params=_params(stage),
                    forward_flops=int(fwd.get_total_flops()),
                    backward_flops=int(bwd.get_total_flops()),
                    boundary_shape=() if last else tuple(int(s) for s in y.shape),
                    boundary_bytes=0 if last else y.numel() * y.element_size(),
                    forward_kernels=fwd_k.kernels,
                    backward_kernels=bwd_k.kernels,
                )
            )
            x = y
    unique = {id(p): p for m in stages for p in m.parameters()}
    return ModelCost(
        task=task.name,
        tier=task.tier,
        model_size=task.model_size,
        n_stages=S,
        microbatches=M,
        microbatch_samples=int(batch.inputs.shape[0]),
        sample_shape=tuple(int(s) for s in batch.inputs.shape[1:]),
        dtype=dtype,
        model_params=sum(p.numel() for p in unique.values()),
        extra={k: v for k, v in sorted(task.budget.extra.items())},
        stages=tuple(rows),
    )


def count_all(entries=ENTRIES, data_dir: str | None = None) -> list[ModelCost]:
    """Every listed entry, counted."""
    return [count(build_task(t, tier, data_dir=data_dir, model_size=size), n) for t, tier, size, n in entries]


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, check=True, timeout=10)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def _document(costs: list[ModelCost]) -> dict:
    return {
        "schema": SCHEMA,
        "command": "python -m suite.pipeline.flops --write",
        "torch": torch.__version__,
        "commit": _git("rev-parse", "HEAD") or "unknown",
        # uncommitted changes when it was written: then the commit alone does not reproduce the counts
        "git_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "counted": COUNTED,
        "entries": [c.to_dict() for c in costs],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m suite.pipeline.flops", description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help=f"write {MODEL_SIZES_FILE.name} (else print a table)")
    ap.add_argument("--check", action="store_true", help="exit 1 when the committed file differs from a recount")
    ap.add_argument("--out", type=Path, default=MODEL_SIZES_FILE, help="where --write writes")
    ap.add_argument("--data-dir", default=None, help="the data sets (default: the tasks' default data dir)")
    args = ap.parse_args(argv)
    costs = count_all(data_dir=args.data_dir)
    if args.check:
        committed = [c.to_dict() for c in load_model_costs()[0]]
        fresh = [c.to_dict() for c in costs]
        if committed != fresh:
            print(f"{MODEL_SIZES_FILE} is out of date: python -m suite.pipeline.flops --write", file=sys.stderr)
            return 1
        print(f"{MODEL_SIZES_FILE.name}: up to date ({len(costs)} entries)")
        return 0
    if args.write:
        args.out.write_text(json.dumps(_document(costs), indent=1) + "\n")
        print(f"wrote {args.out} ({len(costs)} entries)")
        return 0
    for c in costs:
        flops = ", ".join(f"{s.forward_flops / 1e9:.3g}+{s.backward_flops / 1e9:.3g}" for s in c.stages)
        print(
            f"{c.task:<12} {c.model_size or '(' + c.tier + ')':<11} {c.model_params:>13,} params  GFLOP fwd+bwd/stage: {flops}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
