"""Run the matrix cells a records folder lacks, one fair-queue job per cell, resumably.

    python benchmarks/queue_cells.py --tier quick --seeds 3 --have records/mpcbench-baselines \\
        --store results/seeds.jsonl --same-machine [--task sst2 ...] [--match REGEX] [--dry-run]

The cells are the tier's plan for ``--seeds`` (``suite.bench.matrix.plan_cells``); a cell whose key has
an ``ok`` record in a ``--have`` folder or store, or in ``--store``, is left out (``--same-machine``: a
row whose seeds are not all of one machine class runs here every seed not already run here). Each
remaining cell is one job of ``benchmarks/cpuq.py`` (``--both`` when it starts two processes: data- or tensor-parallel
replicas), running exactly that cell as its pytest node (``suite/test_matrix.py::test_cell[ID]``) into
``--store``. All jobs are queued at once, in the order printed (rows kept together, so whatever
finishes first is whole rows), so they keep their places while other people's jobs run. Rerunning the
same command resumes: finished cells are in the store. Run it from a clean checkout (records carry the
commit; ``--root`` names it when this file lives elsewhere).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _done_keys(paths: list[Path]) -> dict[str, str]:
    """Machine class of the latest ``ok`` record of each cell key."""
    from suite.bench.store import read_jsonl
    from suite.results.entries import machine_label

    oks = []
    for p in paths:
        for f in sorted(p.glob("*.jsonl")) if p.is_dir() else [p] if p.exists() else []:
            oks += [r for r in read_jsonl(f)[0] if r.get("status") == "ok"]
    # newest last across every file (a records folder holds a cell's older record in another file)
    oks.sort(key=lambda r: str(r.get("created")))
    return {r["cell_key"]: machine_label(r.get("provenance") or {}) for r in oks}


def _missing(cells: list, done: dict[str, str], machine: str | None) -> list:  # type: ignore[type-arg]
    """The cells to run. Without ``machine``: those without an ok record. With it, per row (a cell
    without its seed): nothing when one machine class holds every seed; else the row's missing
    seeds here, and where its records are another class's, all its seeds (a row is one machine
    class, and a cell's newer record replaces the older one)."""
    if machine is None:
        return [c for c in cells if c.config.key() not in done]
    rows: dict[str, list] = {}  # type: ignore[type-arg]
    for c in cells:
        rows.setdefault(_row(c), []).append(c)
    out = []
    for row in rows.values():
        classes = {done.get(c.config.key()) for c in row}
        if len(classes) == 1 and None not in classes:
            continue  # complete on one class (this one or another)
        # seeds of another class are run here again (a row is one class); those done here are kept
        out += [c for c in row if done.get(c.config.key()) != machine]
    return out


def _row(cell) -> str:  # type: ignore[no-untyped-def]
    """The cell's row within a tier: its configuration without the seed."""
    return dataclasses.replace(cell.config, seed=0).key()


def _two_processes(cfg) -> bool:  # type: ignore[no-untyped-def]
    return cfg.dp > 1 or cfg.tp > 1


def plan(a: argparse.Namespace) -> list[tuple[str, list[str], bool]]:
    """(test id, pytest command, needs both slots) of every cell still to run, rows kept together."""
    from suite.bench.matrix import Selection, plan_cells
    from suite.bench.matrix_file import parse_seeds  # the CLI's own parsing of --seeds

    seeds = parse_seeds(a.seeds, "--seeds")
    cells = plan_cells(Selection(tier=a.tier, tasks=tuple(a.task), seeds=seeds))
    machine = None
    if a.same_machine:
        from suite.bench.provenance import machine_info
        from suite.results.entries import machine_label

        machine = machine_label({"machine": machine_info()})
    done = _done_keys([Path(p) for p in a.have] + [Path(a.store)])
    todo = _missing([c for c in cells if c.runnable], done, machine)
    if a.match:
        todo = [c for c in todo if re.search(a.match, c.test_id)]
    # a row's seeds next to each other; tasks in the order given (or the plan's)
    order = {t: i for i, t in enumerate(a.task)}
    first: dict[str, str] = {}  # a row's place: its first cell's test id, so its seeds stay together
    for c in sorted(todo, key=lambda c: c.test_id):
        first.setdefault(_row(c), c.test_id)
    todo.sort(key=lambda c: (order.get(c.config.task, len(order)), _two_processes(c.config), first[_row(c)], c.test_id))
    out = []
    for c in todo:
        seed = c.config.seed
        cmd = [
            sys.executable, "-m", "pytest", f"suite/test_matrix.py::test_cell[{c.test_id}]",
            "--tier", a.tier, "--task", c.config.task, "--seeds", f"{seed}:{seed + 1}",
            "--results", str(Path(a.store).resolve()), "-q", "-p", "no:cacheprovider",
        ]  # fmt: skip
        out.append((c.test_id, cmd, _two_processes(c.config)))
    return out


def package(store: Path, out: Path, pending: Path, seeds: int) -> None:
    """Split the store's latest ok records: rows (a record's row, ``suite.results.entries``) holding
    ``seeds`` seeds go to ``out`` (for a records folder: a whole row replaces another class's), the
    rest to ``pending`` (kept for a later session's ``--have``: a partial row would split a row)."""
    import json

    from suite.bench.store import read_jsonl
    from suite.results.entries import rows_of

    _, problems = read_jsonl(store)  # the store's own validation first
    if problems:
        raise SystemExit(f"{store}: {problems[0]}")
    lines = store.read_text().splitlines()  # copied verbatim: a verification binds the stored lines
    records = [json.loads(line) for line in lines]
    whole, rest = [], []
    for idx in rows_of(records, ok_only=True).values():  # the board's rows and latest-record rule
        (whole if len({records[i]["seed"] for i in idx}) >= seeds else rest).extend(lines[i] for i in idx)
    for path, lines in ((out, whole), (pending, rest)):
        if lines:
            path.write_text("\n".join(lines) + "\n")
        print(f"{path}: {len(lines)} records")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tier", default="quick")
    ap.add_argument("--seeds", default="3", help="as mpcbench run --seeds: 3 (= 0,1,2), 0,4 or 2:5")
    ap.add_argument("--task", action="append", default=[], help="only this task (repeatable; also the order)")
    ap.add_argument("--have", action="append", default=[], help="records folder or store whose cells are done")
    ap.add_argument("--store", required=True, help="the results store the cells append to")
    ap.add_argument("--match", default=None, help="only cells whose test id matches this regex")
    ap.add_argument("--root", default=str(ROOT), help="the checkout the cells run in (default: this file's)")
    ap.add_argument(
        "--same-machine",
        action="store_true",
        help="a cell counts as done only where its latest record ran on this machine class (rows are per class: "
        "the missing seeds of another class's row are re-run here, seed 0 included, and replace that row)",
    )
    ap.add_argument("--dry-run", action="store_true", help="print the cells, queue nothing")
    ap.add_argument(
        "--package",
        nargs=2,
        metavar=("OUT", "PENDING"),
        help="run nothing: the store's whole rows (every seed of --seeds) to OUT, partial rows to PENDING",
    )
    a = ap.parse_args()
    if a.package:
        from suite.bench.matrix_file import parse_seeds

        package(Path(a.store), Path(a.package[0]), Path(a.package[1]), len(parse_seeds(a.seeds, "--seeds")))
        return 0
    root = Path(a.root).resolve()
    store = Path(a.store).resolve()
    if (
        store.is_relative_to(root)
        and subprocess.run(["git", "-C", str(root), "check-ignore", "-q", str(store)], check=False).returncode
    ):
        # an untracked store in the checkout makes every record it takes say "git_dirty": true
        raise SystemExit(f"--store {a.store}: inside the checkout and not ignored by git; put it under results/")
    cells = plan(a)
    for tid, _cmd, both in cells:
        print(f"{tid}{'  (both slots)' if both else ''}")
    print(f"{len(cells)} cell(s) to run -> {a.store}", file=sys.stderr)
    if a.dry_run or not cells:
        return 0
    jobs = []
    for tid, cmd, both in cells:
        q = [sys.executable, str(root / "benchmarks" / "cpuq.py"), *(["--both"] if both else []), "--name", tid, "--"]
        jobs.append(subprocess.Popen(q + cmd, cwd=root))
        time.sleep(0.3)  # tickets are ordered by their creation time
    return max(j.wait() for j in jobs)


if __name__ == "__main__":
    sys.exit(main())
