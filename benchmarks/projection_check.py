"""Is the projection right where this machine can check it? (issue 47, item 4)

Two checks of the time model's projection arithmetic (``suite.results.projection``), quiet and
interleaved on this CPU at one torch thread, written to ``--out`` (JSON) and printed:

1. **Compute from FLOPs.** shakespeare quick with ``none``: the reference setup (d=128, 4 stages)
   and two others, twice the width (d=256, 4 stages) and half the stages (d=128, 2 stages), each run
   ``--rounds`` times in turn (ABCABC...), short (``--steps``), one process. The reference runs give
   this CPU's achieved FLOP/s per action kind (forward, backward: FLOPs counted by
   ``suite.pipeline.flops`` over the measured compute); the prediction for each other setup is its
   counted FLOPs at that rate, per stage and micro-batch, compared with its measured compute (median
   over rounds). Pass: within +-10 %.
2. **Codec across tensor sizes.** For fp16, int8 (``quant``), top-k 10 % and random-k 10 %: the
   codec's time (compress + decompress) as a multiple of a copy into a kept buffer, measured at a
   1 MiB boundary tensor, predicts its time at 4 MiB and 16 MiB (multiple x the copy's measured time
   there); compared with the measured time (median of ``--reps`` interleaved pairs). Pass: within
   +-15 %.

    OMP_NUM_THREADS=1 python benchmarks/projection_check.py --out benchmarks/results/projection_check.json

Run it alone (``benchmarks/cpuq.py --both -- ...``): the ratios hold under load, the absolute
times do not. The 1-minute load average at start and end is recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETUPS = {  # name: (extra mpcbench run arguments, model size for the FLOP count, stages)
    "d128 x 4 stages (reference)": ([], None, 4),
    "d256 x 4 stages": (["--model-size", "d256"], "d256", 4),
    "d128 x 2 stages": (["--stages", "2"], None, 2),
}
CODECS = ("fp16", "quant", "topk", "randomk")
SIZES_MIB = (1, 4, 16)


def _load() -> float:
    return os.getloadavg()[0]


def run_cell(args: list[str], steps: int, store: Path, seed: int) -> dict:
    """One short single-process run of shakespeare quick with ``none``; its record."""
    cmd = [
        sys.executable, "-m", "suite", "run", "--tier", "quick", "--task", "shakespeare", "--compressor", "none",
        "--steps", str(steps), "--seeds", f"{seed}:{seed + 1}", "--no-baseline", "--mode", "single",
        "--results", str(store), "--no-progress", "--no-round-reports", *args,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    return json.loads(store.read_text().splitlines()[-1])


def stage_compute(record: dict) -> list[dict[str, float]]:
    """Per stage, the measured compute seconds of one micro-batch's F and B."""
    out = []
    for st in record["timing_inputs"]["stages"]:
        acts = st["actions"]
        out.append({k: float(acts[k]["compute_s"]) for k in ("F", "B") if k in acts})
    return out


def flop_counts(model_size: str | None, stages: int) -> list[dict[str, float]]:
    from suite.pipeline.flops import count
    from tasks import build_task

    cost = count(build_task("shakespeare", "quick", model_size=model_size), stages)
    return [{"F": float(s.forward_flops), "B": float(s.backward_flops)} for s in cost.stages]


def check_compute(rounds: int, steps: int, work: Path) -> dict:
    measured: dict[str, list[list[dict[str, float]]]] = {name: [] for name in SETUPS}
    for r in range(rounds):
        for name, (extra, _, _) in SETUPS.items():
            store = work / f"{name.split()[0]}-{name.split()[2]}-r{r}.jsonl"
            rec = run_cell(extra, steps, store, seed=0)
            measured[name].append(stage_compute(rec))
            print(f"  round {r + 1}/{rounds} {name}: {rec['wall_s']:.1f} s, load {_load():.2f}", flush=True)
    med = {
        name: [{k: statistics.median(run[s][k] for run in runs) for k in runs[0][s]} for s in range(len(runs[0]))]
        for name, runs in measured.items()
    }
    ref_name = next(iter(SETUPS))
    ref_flops = flop_counts(None, 4)
    rate = {
        k: sum(f[k] for f in ref_flops) / sum(m[k] for m in med[ref_name]) for k in ("F", "B")
    }  # FLOP/s this CPU achieved on the reference, per action kind
    rows = []
    for name, (_, size, stages) in SETUPS.items():
        if name == ref_name:
            continue
        flops = flop_counts(size, stages)
        pred = sum(f["F"] / rate["F"] + f["B"] / rate["B"] for f in flops)
        meas = sum(m["F"] + m["B"] for m in med[name])
        per_stage = [(f["F"] / rate["F"] + f["B"] / rate["B"]) / (m["F"] + m["B"]) for f, m in zip(flops, med[name])]
        grown = None
        if stages == 4:  # the time model's own rule on this machine: each stage's compute x its FLOPs' ratio
            grown = sum(
                m0["F"] * f["F"] / f0["F"] + m0["B"] * f["B"] / f0["B"]
                for m0, f, f0 in zip(med[ref_name], flops, ref_flops)
            )
        rows.append(
            {
                "setup": name,
                "grown_per_stage_s": grown,
                "grown_ratio": None if grown is None else grown / meas,
                "grown_pass": None if grown is None else abs(grown / meas - 1) <= 0.10,
                "measured_per_stage": med[name],
                "predicted_s": pred,
                "measured_s": meas,
                "ratio": pred / meas,
                "per_stage_ratio": per_stage,
                "pass": abs(pred / meas - 1) <= 0.10,
            }
        )
    return {
        "rate_flops_per_s": rate,
        "reference": ref_name,
        "reference_per_stage": med[ref_name],
        "rows": rows,
        "rounds": rounds,
        "steps": steps,
    }


def check_codec(reps: int) -> dict:
    import torch

    from compressors.api import TensorInfo, TensorRole
    from compressors.registry import build

    torch.set_num_threads(1)
    rows = []
    for spec in CODECS:
        comp = build(spec)
        per_size = {}
        for mib in SIZES_MIB:
            n = mib * 2**20 // 4
            x = torch.randn(8, n // 8)
            dst, src = torch.empty_like(x), torch.zeros_like(x)
            dst.copy_(src)
            info = TensorInfo(TensorRole.ACTIVATION, 0, 0, 10, x.shape, x.dtype, x.device)
            codec, copy = [], []
            for i in range(reps + 3):
                t0 = time.thread_time()
                y = comp.decompress(comp.compress(x, info), info)
                t1 = time.thread_time()
                dst.copy_(y)  # warm: the copy finds the bytes where the codec left them (as Clock.codec)
                t2 = time.thread_time()
                dst.copy_(x)
                t3 = time.thread_time()
                if i >= 3:
                    codec.append(t1 - t0)
                    copy.append(t3 - t2)
            per_size[mib] = {"codec_s": statistics.median(codec), "copy_s": statistics.median(copy)}
        base = per_size[SIZES_MIB[0]]
        multiple = base["codec_s"] / base["copy_s"]
        for mib in SIZES_MIB[1:]:
            got = per_size[mib]
            pred = multiple * got["copy_s"]
            rows.append(
                {
                    "codec": spec,
                    "from_mib": SIZES_MIB[0],
                    "to_mib": mib,
                    "multiple": multiple,
                    "predicted_s": pred,
                    "measured_s": got["codec_s"],
                    "ratio": pred / got["codec_s"],
                    "pass": abs(pred / got["codec_s"] - 1) <= 0.15,
                }
            )
    return {"rows": rows, "reps": reps}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "projection_check.json")
    ap.add_argument("--skip-compute", action="store_true")
    a = ap.parse_args()
    load0, t0 = _load(), time.time()
    out: dict = {"command": " ".join(sys.argv), "load_start": load0}
    print("codec multiples across tensor sizes ...", flush=True)
    out["codec"] = check_codec(a.reps)
    if not a.skip_compute:
        print("compute from FLOPs ...", flush=True)
        with tempfile.TemporaryDirectory() as d:
            out["compute"] = check_compute(a.rounds, a.steps, Path(d))
    out["load_end"], out["wall_s"] = _load(), time.time() - t0
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(out, indent=1) + "\n")
    for r in out["codec"]["rows"]:
        print(f"codec {r['codec']:>8} {r['from_mib']} -> {r['to_mib']} MiB: multiple {r['multiple']:.2f}, "
              f"predicted/measured {r['ratio']:.3f} {'PASS' if r['pass'] else 'FAIL'}")  # fmt: skip
    for r in out.get("compute", {}).get("rows", []):
        print(f"compute {r['setup']}: predicted {r['predicted_s'] * 1e3:.2f} ms / measured {r['measured_s'] * 1e3:.2f} ms"
              f" = {r['ratio']:.3f} {'PASS' if r['pass'] else 'FAIL'} (per stage {', '.join(f'{x:.2f}' for x in r['per_stage_ratio'])})"
              + ("" if r["grown_ratio"] is None else f"; per-stage growth (the model's rule) {r['grown_ratio']:.3f} {'PASS' if r['grown_pass'] else 'FAIL'}"))  # fmt: skip
    print(f"load {out['load_start']:.2f} -> {out['load_end']:.2f}; {out['wall_s']:.0f} s; {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
