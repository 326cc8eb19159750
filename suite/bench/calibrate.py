"""``mpcbench calibrate``: measure one hardware class's compute references and codec multiples.

The time model (:mod:`suite.results.time_model`) prices every row by its setup's compute, its
compressor's codec as a multiple of a copy, and its counted bytes. This command measures the first
two on this machine, for every (setup, compressor) row found in the given records, and writes
``suite/results/calibration/<name>.json`` (:mod:`suite.results.calibration`):

1. **copy**: a one-thread copy of float32 tensors from 4 KiB to 64 MiB into a buffer of the same size
   (the cells' reference, ``Clock.codec``), interleaved over the sizes, median of repeats: the points
   the time model interpolates, and a least-squares ``latency + bytes / bandwidth``;
2. **rounds**: short runs (``--steps``, default 10) of each row's cell config, one process each, one
   torch thread, single-process mode where the setup has one replica. Round 1 runs every row;
   rounds 2..``--repeats`` run ``none`` and the rows whose compressor adds work to the model (it
   has trainable parameters), interleaved setup by setup, so each compared pair ran under the same
   conditions;
3. **derive**: per setup, the median over rounds of ``none``'s per-action compute (robust: thread CPU
   seconds, 25th percentile over steps x micro-batches) with its spread; per row, each codec site's
   multiple (codec CPU seconds over copy CPU seconds, summed over sampled calls); for a learned
   compressor, extra work = the smallest over rounds of its compute over ``none``'s in the same
   round, and 1 unless that is above 1 (the model never credits a compressor with less compute).

Every run's timing inputs are kept under ``--work`` (resumable: a finished run is not repeated),
so the derivation can be checked. Quiet machine wanted: the load average is recorded.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from suite.results import COMMITTED_RECORDS
from suite.results.calibration import CALIBRATION_DIR, DEFAULT_HARDWARE, compute_key
from suite.results.network.timing_inputs import CodecSample

__all__ = ["add_parser", "add_retime_parser", "main", "retime", "plan_runs", "derive", "fit_copy"]

CODEC_REFERENCE = "warm copy_ into a kept buffer, every 2nd call; median of per-call ratios"  # what Clock.codec times beside a codec call (see timing.py)
COPY_SIZES = (4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20)


def _records(folders: Sequence[Path]) -> list[dict[str, Any]]:
    out = []
    for folder in folders:
        for path in sorted(Path(folder).rglob("*.jsonl")):
            for line in path.read_text().splitlines():
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if isinstance(r, dict) and r.get("status") == "ok" and isinstance(r.get("config"), dict):
                    out.append(r)
    return out


def _learned(compressor_spec: dict[str, str]) -> bool:
    """Whether any direction's compressor has trainable parameters (it adds work to the model)."""
    from compressors import build

    for spec in compressor_spec.values():
        if not spec or spec == "none":
            continue
        try:
            comp = build(spec)
        except Exception:  # noqa: BLE001 - a plugin we cannot build here is treated as codec-only
            continue
        if list(comp.modules()):
            return True
    return False


def plan_runs(
    records: list[dict[str, Any]], steps: int, repeats: int, codec_steps: int | None = None
) -> list[dict[str, Any]]:
    """The calibration runs, in the order they run: ``{"round", "key", "compressor", "config", "id"}``.
    One representative config per (setup, compressor) row (the lowest seed's)."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for r in sorted(records, key=lambda r: (r.get("seed", 0), r.get("created", ""))):
        k = (compute_key(r), str(r.get("compressor")))
        rows.setdefault(k, r)
    by_key: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for (key, comp), r in sorted(rows.items()):
        by_key.setdefault(key, []).append((comp, r))
    for members in by_key.values():  # every setup needs its none reference, recorded or not
        if not any(c == "none" for c, _ in members):
            r = members[0][1]
            none_cfg = {**r["config"], "plan": {"forward": "none", "backward": "none", "dp": "none"}}
            members.insert(0, ("none", {**r, "compressor": "none", "config": none_cfg}))
    learned = {
        (key, comp): _learned(dict(r["config"].get("plan") or {})) for key, ms in by_key.items() for comp, r in ms
    }
    runs = []
    for rnd in range(repeats):
        for key, members in by_key.items():
            for comp, r in members:
                if rnd > 0 and comp != "none" and not learned[(key, comp)]:
                    continue
                cfg = dict(r["config"])
                dp = cfg.get("dp") or 1
                # an outer loop reduces every h steps: run at least one period so its codec is seen
                h = re.search(r"h=(\d+)", str(cfg.get("sync") or ""))
                n = (codec_steps or steps) if rnd == 0 else steps  # round 0 is every row's: short runs
                cfg.update(
                    steps=max(n, int(h.group(1))) if h else n,
                    compress_warmup_steps=0,  # a short run compresses from its first step
                    seed=0,
                    mode="single" if dp == 1 and (cfg.get("nnodes") or 1) == 1 else "torchrun",
                    link=None,
                    nnodes=1,
                    node_rank=0,
                    rdzv_endpoint=None,
                    data_dir=None,
                    check_consistency=False,
                    plugins=[],
                )
                # round 0 measures the codec multiples: its runs are tied to the reference they were timed against
                tag = [rnd, key, comp, cfg] + ([CODEC_REFERENCE] if rnd == 0 else [])
                if rnd == 0:
                    cfg["eval_uncompressed"] = False  # evaluation is not timed: round 0 does not pay for it twice
                ident = hashlib.sha256(json.dumps(tag, sort_keys=True, default=str).encode()).hexdigest()[:12]
                runs.append(
                    {
                        "round": rnd,
                        "key": key,
                        "compressor": comp,
                        "config": cfg,
                        "id": ident,
                        "learned": learned[(key, comp)],
                    }
                )
    return runs


def fit_copy(repeats: int = 7) -> dict[str, Any]:
    """``latency_s`` and ``bytes_per_s`` of a one-thread copy (least squares over the sizes'
    medians, the sizes interleaved within each repeat)."""
    import torch

    torch.set_num_threads(1)
    # the reference the cells time (Clock.codec): a copy into a buffer of the same size, no allocation
    xs = {n: (torch.rand(n // 4), torch.empty(n // 4)) for n in COPY_SIZES}
    samples: dict[int, list[float]] = {n: [] for n in COPY_SIZES}
    for _ in range(repeats):
        for n, (x, dst) in xs.items():
            dst.copy_(x)  # pages mapped, caches warm as in a run
            t0 = time.thread_time()
            for _ in range(5):
                dst.copy_(x)
            samples[n].append((time.thread_time() - t0) / 5)
    pts = [(float(n), statistics.median(v)) for n, v in samples.items()]
    mx = statistics.fmean(p[0] for p in pts)
    my = statistics.fmean(p[1] for p in pts)
    slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    latency = max(0.0, my - slope * mx)
    return {"latency_s": latency, "bytes_per_s": 1.0 / slope, "points": [[n, s] for n, s in pts]}


def _run_one(cfg: dict[str, Any], out: Path) -> None:
    """One calibration run in this process (one torch thread): its timing inputs to ``out``."""
    import torch

    torch.set_num_threads(1)
    from suite.pipeline.config import CellConfig
    from suite.pipeline.runtime import run

    res = run(CellConfig.from_dict(cfg))
    ti = res.timing_inputs
    ti = ti if isinstance(ti, dict) else ti.to_dict()
    out.write_text(json.dumps({"timing_inputs": ti, "loadavg": os.getloadavg()}))


def _median_stages(runs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], float]:
    """Per stage the median over runs of each action's compute, optimizer and sync seconds; and the
    relative range of the runs' summed compute."""
    stages = [r["timing_inputs"]["stages"] for r in runs]
    S = len(stages[0])
    out = []
    for s in range(S):
        kinds = sorted({k for st in stages for k in st[s]["actions"]})
        out.append(
            {
                "actions": {
                    k: statistics.median(st[s]["actions"].get(k, {}).get("compute_s", 0.0) for st in stages)
                    for k in kinds
                },
                "optimizer_s": statistics.median(st[s].get("optimizer_s", 0.0) for st in stages),
                "sync_s": statistics.median(st[s].get("sync_s", 0.0) for st in stages),
            }
        )
    totals = [_compute_total(st) for st in stages]
    med = statistics.median(totals)
    return out, ((max(totals) - min(totals)) / med if med > 0 else 0.0)


def _compute_total(stages: list[dict[str, Any]]) -> float:
    return sum(a.get("compute_s", 0.0) for st in stages for a in st["actions"].values()) + sum(
        st.get("optimizer_s", 0.0) for st in stages
    )


def derive(runs: list[dict[str, Any]], results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The calibration's ``compute`` and ``rows`` from the runs' timing inputs (see the module)."""
    compute: dict[str, Any] = {}
    rows: dict[str, Any] = {}
    by_key: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        if run["id"] in results:
            by_key.setdefault(run["key"], []).append(run)
    for key, members in by_key.items():
        nones = [results[m["id"]] for m in members if m["compressor"] == "none"]
        if not nones:
            continue
        stages, spread = _median_stages(nones)
        compute[key] = {"stages": stages, "spread": spread, "repeats": len(nones)}
        none_by_round = {
            m["round"]: _compute_total(results[m["id"]]["timing_inputs"]["stages"])
            for m in members
            if m["compressor"] == "none"
        }
        for comp in sorted({m["compressor"] for m in members}):
            mine = [m for m in members if m["compressor"] == comp]
            codec_runs = [m for m in mine if m["round"] == 0]  # round 0: timed against the current reference
            if not codec_runs:
                continue  # not measured (yet): the row is priced on its records' own seconds and says so
            first = results[codec_runs[0]["id"]]["timing_inputs"]
            tp = mine[0]["config"].get("tp") or 1
            sites = {}
            for site, c in sorted((first.get("codec") or {}).items()):
                m = CodecSample(**c).multiple
                if m is not None:
                    calls = c.get("calls_per_step", 0.0) / (tp if site.startswith("tp.") else 1)
                    sites[site] = {"multiple": m, "nbytes": c["nbytes"], "calls_per_step": calls}
            row: dict[str, Any] = {"sites": sites}
            if comp != "none" and any(m["learned"] for m in mine):
                ratios = [
                    _compute_total(results[m["id"]]["timing_inputs"]["stages"]) / none_by_round[m["round"]]
                    for m in mine
                    if none_by_round.get(m["round"])
                ]
                if ratios:
                    row["extra_work_rounds"] = ratios
                    row["extra_work"] = max(1.0, min(ratios))
            rows[f"{key}|{comp}"] = row
    return {"compute": compute, "rows": rows}


def add_parser(sub: Any) -> None:
    p = sub.add_parser("calibrate", help="measure this machine's compute references and codec multiples (maintainers)")
    p.add_argument(
        "--records", nargs="*", default=[str(COMMITTED_RECORDS)], help="records folders whose rows to calibrate"
    )
    p.add_argument("--name", default=DEFAULT_HARDWARE, help=f"hardware class name (default {DEFAULT_HARDWARE})")
    p.add_argument("--out", default=None, help="calibration file (default suite/results/calibration/NAME.json)")
    p.add_argument("--work", default=None, help="folder of the runs' outputs (default results/calibration-NAME)")
    p.add_argument("--steps", type=int, default=10, help="training steps per run (default 10)")
    p.add_argument("--repeats", type=int, default=3, help="rounds of none and learned rows (default 3)")
    p.add_argument(
        "--codec-steps",
        type=int,
        default=6,
        help="training steps of round 1, every row's run (default 6; >= 6 samples a site)",
    )
    p.add_argument("--only", default="", help="only setups whose key contains this text")
    p.add_argument("-j", "--jobs", type=int, default=1, help="runs at once (default 1: a quiet machine's best)")
    p.add_argument("--dry-run", action="store_true", help="print the runs and exit")
    p.add_argument(
        "--derive-only", action="store_true", help="write the file from the runs already in --work (run nothing more)"
    )
    p.set_defaults(func=main)


def add_retime_parser(sub: Any) -> None:
    p = sub.add_parser(
        "retime", help="write records/<entry>/times.json: the maintainers' entries' modeled times, computed once"
    )
    p.add_argument("entries", nargs="+", help="maintainers' entry folders (e.g. records/mpcbench-baselines)")
    p.add_argument("--name", default=DEFAULT_HARDWARE, help=f"hardware class (default {DEFAULT_HARDWARE})")
    p.set_defaults(func=retime)


def retime(a: argparse.Namespace) -> int:
    from leaderboard.times_file import write_times

    for entry in a.entries:
        try:
            n = write_times(Path(entry), a.name)
        except (OSError, ValueError) as e:
            print(f"mpcbench retime: {entry}: {e}", file=sys.stderr)
            return 2
        print(f"mpcbench retime: {entry}: {n} records")
    return 0


def main(a: argparse.Namespace) -> int:
    if a.steps < 3:
        print(f"mpcbench calibrate: --steps {a.steps}: at least 3 (the first step is warm-up)", file=sys.stderr)
        return 2
    records = _records([Path(f) for f in a.records])
    if not records:
        print(f"mpcbench calibrate: no ok records under {', '.join(a.records)}", file=sys.stderr)
        return 2
    runs = [r for r in plan_runs(records, a.steps, a.repeats, a.codec_steps) if a.only in r["key"]]
    work = Path(a.work or f"results/calibration-{a.name}")
    work.mkdir(parents=True, exist_ok=True)
    if a.dry_run:
        for r in runs:
            print(f"round {r['round']}  {r['key']}  {r['compressor']}  mode={r['config']['mode']}")
        print(f"{len(runs)} runs")
        return 0
    load0 = os.getloadavg()
    copy = fit_copy()
    results: dict[str, dict[str, Any]] = {}

    def one(i: int, run: dict[str, Any]) -> None:
        out = work / f"{run['id']}.json"
        if not out.is_file() and a.derive_only:
            return
        if not out.is_file():
            t0 = time.time()
            cmd = [sys.executable, "-m", "suite.bench.calibrate", "--one", json.dumps(run["config"]), str(out)]
            env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
                print(f"[{i}/{len(runs)}] {run['key']} {run['compressor']}: FAILED: {last}", file=sys.stderr)
                return
            print(
                f"[{i}/{len(runs)}] {run['key']} {run['compressor']} round {run['round']}: {time.time() - t0:.0f} s",
                flush=True,
            )
        results[run["id"]] = json.loads(out.read_text())

    # -j 2: two runs at once, in plan order (each still one thread); contention shows in the loads kept
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        list(pool.map(lambda ir: one(*ir), enumerate(runs, 1)))
    derived = derive(runs, results)
    from suite.bench.provenance import git_info, machine_info  # the same provenance as records

    doc = {
        "schema": "mpcbench.calibration/1",
        "name": a.name,
        "machine": _machine_label(machine_info()),
        "copy": {"latency_s": copy["latency_s"], "bytes_per_s": copy["bytes_per_s"], "points": copy["points"]},
        **derived,
        "provenance": {
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "git": git_info(),
            "machine": machine_info(),
            "loadavg_start": list(load0),
            "loadavg_end": list(os.getloadavg()),
            "steps": a.steps,
            "repeats": a.repeats,
            "runs": len(results),
            "planned_runs": len(runs),
            "jobs": a.jobs,
            "run_loadavg": {r["id"]: results[r["id"]].get("loadavg") for r in runs if r["id"] in results},
        },
    }
    path = Path(a.out or CALIBRATION_DIR / f"{a.name}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(
        f"mpcbench calibrate: wrote {path} ({len(derived['compute'])} setups, {len(derived['rows'])} rows, {len(results)} runs)"
    )
    return 0


def _machine_label(machine: dict[str, Any]) -> str:
    from suite.results.entries import machine_label

    return machine_label({"machine": machine})


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--one":
        _run_one(json.loads(sys.argv[2]), Path(sys.argv[3]))
        sys.exit(0)
    ap = argparse.ArgumentParser(prog="python -m suite.bench.calibrate")
    sub = ap.add_subparsers()
    add_parser(sub)
    sys.exit(main(ap.parse_args(["calibrate", *sys.argv[1:]])))
