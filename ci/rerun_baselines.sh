#!/usr/bin/env bash
# Re-run the committed quick-tier baselines under the calibrated tiers, in parts:
# the store resumes, so interrupt it any time and start it again; finished cells are skipped.
#
#   1. 3 seeds: `none` and the compressors of docs/baselines.md's results table
#      (fp8, topk, powersgd, subspace, ae forward with an uncompressed backward);
#   2. 1 seed:  the low-ratio baselines the board compares against (quant(bits=4), quant(bits=2), topk(ratio=0.01));
#   3. 1 seed:  every other entry of the quick tier (rows with one seed are marked so on the
#      leaderboard: their differences are not tested).
#
# Usage: ci/rerun_baselines.sh [extra mpcbench run args, e.g. --task cifar10]
#   RESULTS=path.jsonl  results store (default results/quick-baselines.jsonl); when done,
#   copy it into records/mpcbench-baselines/ with the machine it ran on (mpcbench validate first).
#   JOBS=N       cells at once (mpcbench run -j N: each pinned to cores/N torch threads; default 1,
#                one cell at a time, which keeps the CPU tier's measured times comparable; see
#                docs/performance.md "Cells side by side" for what -j 2 does to them on 2 cores).
#   RAY_ADDRESS=auto|HOST:6379  run the cells as tasks on that Ray cluster instead (--executor ray).
# Cost: about 85 cells, an estimate from the quick list and the one-cell CPU times measured in
# docs/tasks.md ("The calibrated quick tier"); this script was not timed end to end.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
RESULTS=${RESULTS:-results/quick-baselines.jsonl}
JOBS=${JOBS:-1}
EXECUTOR=(-j "$JOBS")
[ -n "${RAY_ADDRESS:-}" ] && EXECUTOR=(--executor ray --address "$RAY_ADDRESS")
run() { python -m suite.bench.cli run --tier quick --results "$RESULTS" --no-progress "${EXECUTOR[@]}" "$@"; }

# 1. three seeds (the none baseline is added by --compressor)
run --seeds 3 --compressor fp8 --compressor topk --compressor powersgd --compressor subspace "$@"
run --seeds 3 --forward ae --backward none --no-baseline "$@"
# 2. the low-ratio baselines, one seed
run --seeds 1 --compressor "quant(bits=4)" --compressor "quant(bits=2)" --compressor "topk(ratio=0.01)" --no-baseline "$@"
# 3. the rest of the tier, one seed (cells of steps 1-2 already in the store are skipped)
run --seeds 1 "$@"
python -m suite.bench.cli validate "$RESULTS"
