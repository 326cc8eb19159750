"""The measured seed spread per task and tier (``tier_spread.json``): read it, and re-measure it
from stored records.

The leaderboard's minimal detectable difference for rows with fewer than two seeds uses these
figures (``leaderboard.statistics.MEASURED_SPREAD``). They are measured, never typed in: after a
re-run of the baselines, regenerate the file from the records::

    python -m suite.results.tier_spread records/mpcbench-baselines/*.jsonl --write

which takes, per (task, tier), the ``ok`` records of the uncompressed ``none`` cell on the
default setup (latest record per cell key), their final metric per seed, and the sample standard
deviation over seeds; the evaluation-subset size is kept from the file (it is the tier's budget,
docs/tasks.md). Torch-free.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping

__all__ = ["SPREAD_FILE", "load_spread", "measure_spread", "sample_std", "main"]

SPREAD_FILE = Path(__file__).with_name("tier_spread.json")
SCHEMA = "mpcbench.tier_spread/1"


def load_spread(path: str | Path = SPREAD_FILE) -> list[dict[str, Any]]:
    """The ``spread`` entries of the file (``task``, ``tier``, ``metric``, ``seed_std``,
    ``eval_samples``, ``seeds`` {seed: metric}, ``source``); [] if the file is missing."""
    p = Path(path)
    if not p.exists():
        return []
    data = json.loads(p.read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{p}: schema {data.get('schema')!r}, expected {SCHEMA!r}")
    return list(data["spread"])


def sample_std(values: list[float]) -> float:
    """Sample standard deviation. (Not ``statistics.stdev``: the Streamlit app runs with
    ``leaderboard/`` on ``sys.path``, where ``statistics`` is ``leaderboard/statistics.py``.)"""
    m = sum(values) / len(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


def measure_spread(records: Iterable[Mapping[str, Any]], known: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Re-measured entries: for every (task, tier) with >= 2 seeds of ``ok`` default-setup
    ``none`` records; ``known`` (the current file) supplies ``eval_samples`` and keeps the
    entries the records do not cover."""
    latest: dict[str, Mapping[str, Any]] = {}
    for r in records:
        plan = (r.get("config") or {}).get("plan") or {}
        run = r.get("run") or {}
        if (
            r.get("status") == "ok"
            and r.get("compressor") == "none"
            and all(v == "none" for v in plan.values())
            and run.get("dp", 1) == 1
            and int((r.get("config") or {}).get("tp") or 1) == 1  # the pipeline baseline, not the tp group
            and (r.get("config") or {}).get("steps") is None
            and (r.get("config") or {}).get("link") is None
        ):
            prev = latest.get(r["cell_key"])
            if prev is None or str(r.get("created", "")) >= str(prev.get("created", "")):
                latest[r["cell_key"]] = r
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in latest.values():
        groups.setdefault((r["task"], r["tier"]), []).append(r)
    out = {(e["task"], e["tier"]): dict(e) for e in known}
    for (task, tier), recs in sorted(groups.items()):
        seeds = {str(r["seed"]): float(r["final_metric"]) for r in sorted(recs, key=lambda r: r["seed"])}
        if len(seeds) < 2:
            continue
        first = recs[0]
        machine = (first.get("provenance") or {}).get("machine") or {}
        run = first.get("run") or {}
        commit = str((first.get("provenance") or {}).get("git_commit") or "")[:7]
        day = str(first.get("created", ""))[:10]
        entry = out.get((task, tier), {"task": task, "tier": tier, "eval_samples": None})
        entry.update(
            metric=first.get("metric_name"),
            seed_std=round(sample_std(list(seeds.values())), 5),
            seeds={k: round(v, 4) for k, v in seeds.items()},
            measured_tier_budget=True,
            source=(
                f"none, seeds {','.join(seeds)}, {run.get('steps')} steps, "
                f"{machine.get('cpu_count', '?')}-core {machine.get('cpu', '?')} "
                f"{'with ' + str(machine['gpu']) if machine.get('gpu') else 'CPU'}, "
                f"commit {commit}, {day}"
            ),
        )
        out[(task, tier)] = entry
    return [out[k] for k in sorted(out)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("stores", nargs="+", help="results stores / record files (JSON Lines)")
    p.add_argument("--write", action="store_true", help=f"rewrite {SPREAD_FILE.name} (default: print)")
    args = p.parse_args(argv)
    records = []
    for s in args.stores:
        for line in Path(s).read_text().splitlines():
            if line.strip():
                try:
                    records.append(json.loads(line))
                except ValueError:
                    continue  # a torn last line
    current = json.loads(SPREAD_FILE.read_text()) if SPREAD_FILE.exists() else {"schema": SCHEMA, "about": ""}
    known = current.get("spread", [])
    current["spread"] = measure_spread(records, known if isinstance(known, list) else [])
    text = json.dumps(current, indent=1) + "\n"
    if args.write:
        SPREAD_FILE.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
