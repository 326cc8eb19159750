"""Seed 002's data-parallel rows under momentum SGD, DGC's own setting: a learning-rate
sweep on a seed that is never judged, then the judged seeds of each arm at its own best rate.

    python benchmarks/dp_momentum_plateau.py --store results/dp-momentum.jsonl [--dry-run]

Arms (2 replicas of shakespeare unsplit, 600 steps, the plateau tier; ~45x where compressed):
``none``, top-k without error feedback, top-k with it, and DGC as published (momentum correction
and masking, local clipping, sparsity warm-up over the first 60 steps, 10 % of training). All
run ``sgd(momentum=0.9, clip=1.0)``; under DGC the momentum and the clip live in the code.

The rule, fixed before any sweep cell ran: each arm runs each rate of RATES at SWEEP_SEED; its
judged rate is the one whose final validation loss there is lowest (a failed or non-finite run
counts as the worst; a tie goes to the smaller rate). The choice is written to ``--choice``
(JSON) before any judged cell starts, and the judged seeds then run seed by seed across the arms
(seed 0 of every arm, then seed 1, ...), so whatever has finished is paired.

Each cell is one job of the fair queue (``benchmarks/cpuq.py --both``: two replicas, two
processes) appending to ``--store``. A phase's jobs are queued together, in order (the sweep's 12,
then the judged 20), so they keep their places in the queue while they wait; they run one at a
time. A cell already in the store is skipped, so rerunning the same command resumes. Run it from a
clean checkout (the records carry the commit; ``--root`` names it when this file lives elsewhere).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

ARMS = {
    "none": "none",
    "topk": "topk(ratio=0.015)",
    "ef-topk": "ef(topk(ratio=0.015))",
    "dgc": "dgc(ratio=0.015, clip=1.0, warmup_steps=60)",
}
OPTIMIZER = "sgd(momentum=0.9, clip=1.0)"
RATES = (0.1, 0.3, 1.0)
SWEEP_SEED = 100
JUDGED_SEEDS = (0, 1, 2, 3, 4)
SETTINGS = ["--tier", "plateau", "--task", "shakespeare", "--dp-size", "2", "--stages", "1", "--steps", "600"]
ROOT = Path(__file__).resolve().parents[1]


def command(arm: str, lr: float, seed: int, store: str) -> list[str]:
    """The ``mpcbench run`` command of one cell."""
    dp = [] if ARMS[arm] == "none" else ["--dp", ARMS[arm]]
    return [
        sys.executable, "-m", "suite", "run", *SETTINGS, "--compressor", "none", *dp,
        "--optimizer", OPTIMIZER, "--lr", f"{lr:g}", "--seeds", f"{seed}:{seed + 1}", "--no-baseline",
        "--results", store,
    ]  # fmt: skip


def queued(arm: str, lr: float, seed: int, store: str, root: Path = ROOT) -> list[str]:
    """The same command as one job of the fair queue."""
    name = f"h46:{arm}-lr{lr:g}-s{seed}"
    queue = [sys.executable, str(root / "benchmarks" / "cpuq.py"), "--both", "--name", name, "--"]
    return queue + command(arm, lr, seed, store)


def run_phase(cells: list[tuple[str, float, int]], store: str, root: Path) -> None:
    """Queue every cell of a phase now, in order (a ticket each), and wait for all of them."""
    jobs = []
    for cell in cells:
        jobs.append(subprocess.Popen(queued(*cell, store, root), cwd=root))
        time.sleep(0.5)  # tickets are ordered by their creation time
    for j in jobs:
        j.wait()


def final_loss(store: Path, arm: str, lr: float, seed: int) -> float:
    """The stored cell's final validation loss; inf when it failed or is missing."""
    best = math.inf
    if not store.exists():
        return best
    for line in store.read_text().splitlines():
        r = json.loads(line)
        cfg = r.get("config") or {}
        if (
            r.get("seed") == seed
            and cfg.get("lr") == lr
            and (r.get("specs") or {}).get("dp") == ARMS[arm]
            and r.get("status") == "ok"
            and isinstance(r.get("final_metric"), (int, float))
            and math.isfinite(r["final_metric"])
        ):
            best = float(r["final_metric"])  # the latest record of the cell
    return best


def choose(store: Path) -> dict[str, float]:
    """The rule above: per arm, the rate with the lowest final loss at SWEEP_SEED (ties: the smaller)."""
    return {arm: min(RATES, key=lambda lr: (final_loss(store, arm, lr, SWEEP_SEED), lr)) for arm in ARMS}


def package(store: Path, records: Path) -> None:
    """Copy the store's ok records, verbatim (the latest of each cell), into the plateau entry: the
    sweep's (SWEEP_SEED) and the judged seeds' in two files, so the sweep stays marked as such."""
    latest: dict[str, str] = {}
    for line in store.read_text().splitlines():
        r = json.loads(line)
        if r.get("status") == "ok":
            latest[r["cell_key"]] = line
    for name, keep in (
        ("dp-momentum-sweep-cpu-2core.jsonl", lambda r: r["seed"] == SWEEP_SEED),
        ("dp-momentum-cpu-2core.jsonl", lambda r: r["seed"] in JUDGED_SEEDS),
    ):
        lines = [line for line in latest.values() if keep(json.loads(line))]
        if lines:
            (records / name).write_text("\n".join(lines) + "\n")
            print(f"{records / name}: {len(lines)} records")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", required=True, help="the results store (JSON Lines), appended to")
    ap.add_argument("--choice", default=None, help="where the chosen rates go (default: STORE.choice.json)")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    ap.add_argument("--root", default=str(ROOT), help="the checkout the cells run in (default: this file's)")
    ap.add_argument(
        "--package", metavar="DIR", help="copy the finished records into DIR (records/mpcbench-plateau), run nothing"
    )
    a = ap.parse_args()
    root = Path(a.root).resolve()
    if a.package:
        package(Path(a.store), Path(a.package))
        return 0
    store = Path(a.store).resolve()
    choice_path = Path(a.choice) if a.choice else store.with_suffix(".choice.json")
    sweep = [(arm, lr, SWEEP_SEED) for arm in ARMS for lr in RATES]
    if a.dry_run:
        for cell in sweep:
            print(" ".join(command(*cell, str(store))))
        print(f"then, per arm, the judged seeds {JUDGED_SEEDS} at the rate chosen by the rule")
        return 0
    run_phase(sweep, str(store), root)
    rates = choose(store)
    losses = {arm: {f"{lr:g}": final_loss(store, arm, lr, SWEEP_SEED) for lr in RATES} for arm in ARMS}
    choice_path.write_text(json.dumps({"rule": "lowest final validation loss at the sweep seed; ties: smaller rate",
                                       "sweep_seed": SWEEP_SEED, "optimizer": OPTIMIZER, "codes": ARMS,
                                       "losses": losses, "chosen": rates}, indent=1) + "\n")  # fmt: skip
    print(f"chosen rates: {rates} ({choice_path})", flush=True)
    run_phase([(arm, rates[arm], seed) for seed in JUDGED_SEEDS for arm in ARMS], str(store), root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
