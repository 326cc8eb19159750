# Sourced by the ci/ scripts: the interpreter they use (PY) and where the data sets are.
#
# PY: $PYTHON if set; else the active virtual environment's python ($VIRTUAL_ENV); else the
# project's own virtual environment .venv in the checkout (ci/setup.sh creates it, with the
# system's site packages visible so that an installed torch is reused, not downloaded again).
# MPCBENCH_NO_VENV=1 uses `python` from PATH as it is (the old behaviour).
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MPCBENCH_VENV=""
if [ -n "${PYTHON:-}" ]; then
    PY="$PYTHON"
elif [ -n "${VIRTUAL_ENV:-}" ]; then
    PY="$VIRTUAL_ENV/bin/python"
elif [ "${MPCBENCH_NO_VENV:-0}" = 1 ]; then
    PY=python
else
    MPCBENCH_VENV="$ROOT/.venv"
    PY="$MPCBENCH_VENV/bin/python"
    # children (pytest's subprocesses, `mpcbench`, `streamlit`) find the same environment
    export VIRTUAL_ENV="$MPCBENCH_VENV"
    case ":$PATH:" in *":$MPCBENCH_VENV/bin:"*) ;; *) export PATH="$MPCBENCH_VENV/bin:$PATH" ;; esac
fi
export PY MPCBENCH_VENV

# MPCBENCH_DATA_DIR wins if set; else ../shared/data next to the checkout when it exists
# (the offline copy on the project's machines); else the tasks' own default
# (~/.cache/mpcbench/data, downloaded on first use when there is internet).
if [ -z "${MPCBENCH_DATA_DIR:-}" ] && [ -d "$ROOT/../shared/data" ]; then
    MPCBENCH_DATA_DIR="$(cd "$ROOT/../shared/data" && pwd)"
    export MPCBENCH_DATA_DIR
fi
