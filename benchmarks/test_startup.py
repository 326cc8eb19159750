"""Start-up: seconds from ``mpcbench run`` starting to the first training step of a smoke cell.

Issue 13's target: within 6 s on an idle 2-core machine. The command is the one a user types
(``python -m suite.bench.cli run --tier smoke --task cifar10 --compressor none``, one seed, a
fresh store); ``MPCBENCH_TRACE=1`` makes the trainer print the epoch time at which step 0
begins, read back from the cell's log. Each round is a fresh command, so every round pays
the whole start-up: interpreter, planning (the runner imports torch to build the specs), the
fork server (started before that import, ``suite.bench.forkserver.prestart``, so the two
imports overlap), the fork, the task's data and model.

``extra_info``: the median and minimum over rounds of start -> first step and of the whole
command, the 1-minute load average before and after, and the CPU count. Run with
``pytest benchmarks/test_startup.py -s`` (needs the CIFAR-10 data: ``MPCBENCH_DATA_DIR``).

Anchors (issue 28: start-up within 1.5x of importing torch): every round also times
``python -c "import torch"``, ``python -c "import torch, torch._dynamo"`` (what any cell imports
before it trains: the first ``torch.optim`` step imports ``torch._dynamo``, so the fork server
preloads it) and ``python -c "import torch, torchvision"`` (what a cifar10 cell cannot start
without: its ResNet-18 comes from torchvision, whose import also imports ``torch._dynamo``), in
alternating order with the command, so all of them see the same load;
the ratios of each round (first step / anchor) are reported as min / median / max.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROUNDS = int(os.environ.get("MPCBENCH_STARTUP_ROUNDS", "3"))
TRACE = re.compile(r"mpcbench-trace first-step (\d+\.\d+)")


def _data_dir() -> Path | None:
    for d in (os.environ.get("MPCBENCH_DATA_DIR"), ROOT.parent / "shared" / "data"):
        if d and any((Path(d) / n).exists() for n in ("cifar10-jpg.tar.gz", "cifar-10-batches-py")):
            return Path(d)
    return None


def _one(tmp: Path, data: Path) -> tuple[float, float]:
    store = tmp / f"store-{time.monotonic_ns()}.jsonl"
    env = dict(os.environ, MPCBENCH_TRACE="1", MPCBENCH_DATA_DIR=str(data))
    cmd = [sys.executable, "-m", "suite.bench.cli", "run", "--tier", "smoke", "--task", "cifar10"]
    cmd += ["--compressor", "none", "--no-baseline", "--seeds", "1", "--results", str(store), "--no-progress"]
    t0 = time.time()
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, timeout=300)
    total = time.time() - t0
    logs = list(store.parent.glob(f"{store.stem}.logs/*.log"))
    text = "".join(p.read_text() for p in logs)
    m = TRACE.search(text)
    assert m, f"no first-step trace in the cell log: {text[-500:]}"
    return float(m.group(1)) - t0, total


ANCHORS = {
    "import torch": "import torch",
    # what every cell imports before it can train: the first torch.optim step imports torch._dynamo
    "import torch, torch._dynamo": "import torch, torch._dynamo",
    "import torch, torchvision": "import torch, torchvision",
}


def _anchor(code: str) -> float:
    t0 = time.time()
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, timeout=300)
    return time.time() - t0


def test_smoke_cell_first_step_vs_import_torch(benchmark, tmp_path):
    """Interleaved rounds: the smoke cell's start -> first step against the anchors."""
    data = _data_dir()
    if data is None:
        pytest.skip("CIFAR-10 not found (set MPCBENCH_DATA_DIR)")
    load_before = os.getloadavg()[0]
    firsts: list[float] = []
    anchors: dict[str, list[float]] = {k: [] for k in ANCHORS}

    def rounds() -> None:
        for r in range(ROUNDS):
            order = list(ANCHORS.items())
            if r % 2:
                order.reverse()
            if r % 2:
                firsts.append(_one(tmp_path, data)[0])
            for name, code in order:
                anchors[name].append(_anchor(code))
            if not r % 2:
                firsts.append(_one(tmp_path, data)[0])

    benchmark.pedantic(rounds, rounds=1, iterations=1)
    info: dict[str, float] = {"load_1m_before": load_before, "load_1m_after": os.getloadavg()[0]}
    lines = []
    for name, times in anchors.items():
        ratios = sorted(f / a for f, a in zip(firsts, times))
        key = re.sub(r"[^a-z]+", "_", name.replace("import ", ""))
        info.update(
            {f"ratio_{key}_min": ratios[0], f"ratio_{key}_median": median(ratios), f"ratio_{key}_max": ratios[-1]}
        )
        info[f"{key}_s_median"] = median(times)
        lines.append(f"vs `{name}` ({median(times):.2f} s): {ratios[0]:.2f} / {median(ratios):.2f} / {ratios[-1]:.2f}")
    benchmark.extra_info.update(first_step_s_median=median(firsts), rounds=ROUNDS, **info)
    print(
        f"\nstart -> first step median {median(firsts):.2f} s; ratio min / median / max "
        + "; ".join(lines)
        + f"; load {load_before:.1f} -> {os.getloadavg()[0]:.1f}"
    )


def test_smoke_cell_first_step(benchmark, tmp_path):
    data = _data_dir()
    if data is None:
        pytest.skip("CIFAR-10 not found (set MPCBENCH_DATA_DIR)")
    load_before = os.getloadavg()[0]
    firsts, totals = [], []

    def rounds() -> None:
        for _ in range(ROUNDS):
            first, total = _one(tmp_path, data)
            firsts.append(first)
            totals.append(total)

    benchmark.pedantic(rounds, rounds=1, iterations=1)
    benchmark.extra_info.update(
        first_step_s_median=median(firsts),
        first_step_s_min=min(firsts),
        command_s_median=median(totals),
        rounds=ROUNDS,
        load_1m_before=load_before,
        load_1m_after=os.getloadavg()[0],
        cpus=os.cpu_count(),
        target_s=6.0,
    )
    print(
        f"\nstart -> first step: median {median(firsts):.2f} s, min {min(firsts):.2f} s over {ROUNDS} rounds; "
        f"whole command {median(totals):.2f} s; load {load_before:.1f} -> {os.getloadavg()[0]:.1f}"
    )
