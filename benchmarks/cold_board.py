"""The board from the committed records with nothing cached: CPU seconds, wall seconds, the load.

    python benchmarks/cold_board.py [--repeat 3]

Loads every entry under records/ and builds the leaderboard frame (``to_frame``: the time model's
columns for every record) in a fresh interpreter each time, with the re-modeling in this process
(``MPCBENCH_INDEX_WORKERS=1``: CPU seconds are the whole cost). Issue 44's target: <= 2 CPU seconds.
Prints one line per run and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, resource, time
t0 = time.process_time(); w0 = time.time()
from leaderboard.submissions import load_entries
from leaderboard.frame import to_frame
from suite.results import COMMITTED_RECORDS
t1 = time.process_time()
records, _ = load_entries(COMMITTED_RECORDS)
frame = to_frame(records, details=False)
t2 = time.process_time()
print(json.dumps({"import_cpu_s": t1 - t0, "board_cpu_s": t2 - t1, "wall_s": time.time() - w0, "rows": len(frame),
                  "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    env = {**os.environ, "MPCBENCH_INDEX_WORKERS": "1"}
    print(f"load average before: {os.getloadavg()}")
    for _ in range(a.repeat):
        out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
        got = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"board {got['board_cpu_s']:.2f} CPU s (imports {got['import_cpu_s']:.2f}), wall {got['wall_s']:.2f} s, "
            f"{got['rows']} rows, {got['max_rss_mb']:.0f} MB"
        )
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
