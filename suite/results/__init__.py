"""results: the torch-free record schema, network model and store location shared by the runner and the leaderboard."""

from pathlib import Path

DEFAULT_STORE = "results/store.jsonl"  # the results store, relative to where a command starts
# the checkout's committed submissions (records/ beside suite/): what `mpcbench report` reads when
# it is given no source, so a fresh clone reports the maintainers' baselines and every entry
COMMITTED_RECORDS = Path(__file__).resolve().parents[2] / "records"
