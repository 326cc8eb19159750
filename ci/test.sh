#!/usr/bin/env bash
# The test command of the README: install, then
#   1. python -m pytest                     the test suite (testpaths = tests)
#   2. python -m pytest suite --tier smoke  the smoke matrix, into a temporary results store (2 cells at once)
#   3. mpcbench validate                    that store
# Exits non-zero if any step fails (pytest's "no tests collected", exit 5, is a failure).
# Extra arguments go to step 1 (e.g. -x, -k expr); MPCBENCH_SMOKE_ARGS to step 2.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash ci/setup.sh || exit 1
source ci/env.sh  # PY: the project .venv (or $PYTHON / the active environment); the data directory

# headless Chromium for the leaderboard's browser test; without it that test skips
if [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "ci/test.sh: installing chromium (Debian package) for the browser test"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
        || echo "ci/test.sh: could not install chromium; the browser test will skip"
fi

failed=0
echo "== python -m pytest (data: ${MPCBENCH_DATA_DIR:-default})"
"$PY" -m pytest --durations=25 "$@"  # the slowest 25 in every CI log: where the time goes
rc=$?
[ $rc -eq 0 ] || { echo "ci/test.sh: pytest failed (exit $rc)"; failed=1; }

SMOKE_DIR="$(mktemp -d "${TMPDIR:-/tmp}/mpcbench-smoke.XXXXXX")"
# two cells at a time where there are two cores (pytest-xdist, a dev dependency: each worker pins its
# cells to its share of the cores and appends to the store under its lock); MPCBENCH_SMOKE_ARGS="-n 0"
# runs them one by one. --benchmark-disable: the cells' records are the output (xdist would disable
# pytest-benchmark's timing table anyway, with a warning)
WORKERS="$("$PY" -c 'import os; print(min(2, len(os.sched_getaffinity(0))))')"
echo "== python -m pytest suite --tier smoke -n $WORKERS (results: $SMOKE_DIR/store.jsonl)"
# shellcheck disable=SC2086  # MPCBENCH_SMOKE_ARGS is a list of words on purpose
"$PY" -m pytest suite --tier smoke -n "$WORKERS" --benchmark-disable --results "$SMOKE_DIR/store.jsonl" \
    -p no:cacheprovider -rfEs ${MPCBENCH_SMOKE_ARGS:-}
rc=$?
[ $rc -eq 0 ] || { echo "ci/test.sh: smoke matrix failed (exit $rc)"; failed=1; }
"$PY" -m suite validate "$SMOKE_DIR/store.jsonl" || { echo "ci/test.sh: smoke store invalid"; failed=1; }

if [ $failed -ne 0 ]; then
    echo "ci/test.sh: FAILED"
    exit 1
fi
echo "ci/test.sh: all passed"
