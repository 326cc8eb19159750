#!/usr/bin/env bash
# The main job on a fresh machine: install, run the core matrix into results/store.jsonl, print the ranking.
#
#   bash ci/main.sh                       # the core matrix: seed 0 of the quick tier's listed rounds
#   bash ci/main.sh --all                 # the whole quick tier (every compressor, 3 seeds; resumes the core)
#   bash ci/main.sh -j 1                  # other arguments go to `mpcbench run` (-j: cells at once)
#   MPCBENCH_TIER=smoke bash ci/main.sh   # a different tier (its every cell)
#
# Cells run breadth-first (seed 0 of the headline compressors on every task first) and as many at
# once as there are cores; a ranking is printed after each round. Rerunning resumes: cells already in
# results/store.jsonl are skipped. Exit status: non-zero if any cell failed (every cell is still
# attempted and the report is still printed).
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
SCOPE=()
[ "$TIER" = quick ] && SCOPE=(--core)  # the core matrix unless --all (or another tier) is asked for
ARGS=()
for a in "$@"; do
    if [ "$a" = --all ]; then SCOPE=(); else ARGS+=("$a"); fi
done
echo "== mpcbench run --tier $TIER ${SCOPE[*]} -> $STORE (data: ${MPCBENCH_DATA_DIR:-default})"
start=$(date +%s)
"$PY" -m suite run --tier "$TIER" "${SCOPE[@]}" --results "$STORE" "${ARGS[@]}"
run_rc=$?
echo "== matrix wall-clock: $(( $(date +%s) - start )) s"
"$PY" -m suite validate "$STORE" || run_rc=1
echo "== mpcbench report --results $STORE"
"$PY" -m suite report --results "$STORE" --tier "$TIER"
echo
echo "Open the leaderboard: streamlit run leaderboard/app.py   (shows $STORE next to the committed records/)"
[ ${#SCOPE[@]} -gt 0 ] && echo "The whole quick tier (every compressor, 3 seeds; the cells above are kept): bash ci/main.sh --all"
exit $run_rc
