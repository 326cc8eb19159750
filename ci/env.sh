# Sourced by the ci/ scripts: where the data sets are.
# MPCBENCH_DATA_DIR wins if set; else ../shared/data next to the checkout when it exists
# (the offline copy on the project's machines); else the tasks' own default
# (~/.cache/mpcbench/data, downloaded on first use when there is internet).
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -z "${MPCBENCH_DATA_DIR:-}" ] && [ -d "$ROOT/../shared/data" ]; then
    MPCBENCH_DATA_DIR="$(cd "$ROOT/../shared/data" && pwd)"
    export MPCBENCH_DATA_DIR
fi
