#!/usr/bin/env bash
# The main job on a fresh machine: install, run the quick matrix into results/store.jsonl,
# print the ranking.
#
#   bash ci/main.sh                       # quick tier, every task, seeds from the matrix (3)
#   bash ci/main.sh --seeds 3             # extra arguments go to `mpcbench run`
#   MPCBENCH_TIER=smoke bash ci/main.sh   # a different tier
#
# Rerunning resumes: cells already in results/store.jsonl are skipped. Exit status: non-zero
# if any cell failed (every cell is still attempted and the report is still printed).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash ci/setup.sh || exit 1
source ci/env.sh  # PY: the project .venv (or $PYTHON / the active environment); the data directory

# one torch thread per cell, as the committed baselines ran (ci/rerun_baselines.sh): the same numerics,
# and per-action costs in thread CPU seconds, which do not grow with the machine's load
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" MKL_NUM_THREADS="${MKL_NUM_THREADS:-1}"
TIER="${MPCBENCH_TIER:-quick}"
STORE="${MPCBENCH_RESULTS:-results/store.jsonl}"
echo "== mpcbench run --tier $TIER -> $STORE (data: ${MPCBENCH_DATA_DIR:-default})"
start=$(date +%s)
"$PY" -m suite run --tier "$TIER" --results "$STORE" "$@"
run_rc=$?
echo "== matrix wall-clock: $(( $(date +%s) - start )) s"
"$PY" -m suite validate "$STORE" || run_rc=1
echo "== mpcbench report --results $STORE"
"$PY" -m suite report --results "$STORE" --tier "$TIER"
echo
echo "Open the leaderboard: streamlit run leaderboard/app.py   (reads $STORE and records/)"
exit $run_rc
