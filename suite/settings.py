"""Every ``MPCBENCH_*`` environment variable in one table, and the readers ``suite`` uses.

The table (:data:`SETTINGS`) is the one list of variables: ``docs/ARCHITECTURE.md`` shows it
and ``tests/architecture/test_settings.py`` fails if a variable is read anywhere without a
row here, or if ``suite`` reads ``os.environ`` for one outside this module. ``compressors``,
``tasks`` and ``leaderboard`` sit below or beside ``suite`` (they must not import it), so
they keep reading their own variables where they are used; their rows say where.

A leaf: imports nothing of ours and not torch, so every layer of ``suite`` may use it.
Values are read at call time, never cached, so tests and callers can switch them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Setting",
    "SETTINGS",
    "get",
    "enabled",
    "check_consistency",
    "clock",
    "isolation",
    "trace",
    "git_commit",
    "cell_resources",
]


@dataclass(frozen=True)
class Setting:
    """One environment variable: its default (as text, ``""``: unset) and what it changes."""

    name: str
    default: str
    meaning: str
    read_by: str


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "MPCBENCH_DATA_DIR",
        "",
        "where the data sets are (`--data-dir` wins; else ../shared/data, else ~/.cache/mpcbench/data)",
        "tasks/api.py",
    ),
    Setting(
        "MPCBENCH_CACHE_DIR",
        "",
        "decoded data-set arrays and AQ-SGD buffers (else ~/.cache/mpcbench and the temp dir)",
        "tasks/data.py, compressors/builtins/aqsgd.py",
    ),
    Setting("MPCBENCH_OFFLINE", "", "`1`: never download a data set", "tasks/data.py"),
    Setting("MPCBENCH_SST2_MODEL", "", "the pretrained encoder of sst2 (hub id or folder)", "tasks/sst2.py"),
    Setting(
        "MPCBENCH_TASK_PATH",
        "",
        "folders of task modules kept outside tasks/ (os.pathsep-separated; each module one task, CONTRIBUTING.md)",
        "tasks/__init__.py, suite/results/task_catalog.py",
    ),
    Setting(
        "MPCBENCH_COMPILE",
        "auto",
        "torch.compile'd compressor kernels: `auto`, `0` or `1`",
        "compressors/builtins/_fast.py",
    ),
    Setting(
        "MPCBENCH_PLUGIN_IMPORT_TIMEOUT_S",
        "60",
        "deadline in seconds for importing one plugin",
        "compressors/plugins.py",
    ),
    Setting(
        "MPCBENCH_CHECK_CONSISTENCY",
        "",
        "`1`: the sender/receiver consistency check in every run (same as `--check-consistency`)",
        "suite/settings.py -> suite/pipeline/runtime.py",
    ),
    Setting(
        "MPCBENCH_CLOCK",
        "events",
        "section timing on CUDA: `events` (CUDA events) or `sync` (synchronize)",
        "suite/settings.py -> suite/pipeline/timing.py",
    ),
    Setting(
        "MPCBENCH_ISOLATION",
        "fork",
        "`spawn`: each cell in a fresh interpreter instead of the fork server",
        "suite/settings.py -> suite/bench/cell.py",
    ),
    Setting(
        "MPCBENCH_TRACE",
        "",
        "`1`: torchrun workers print phase timestamps",
        "suite/settings.py -> suite/pipeline/worker.py",
    ),
    Setting(
        "MPCBENCH_GIT_COMMIT",
        "",
        "the commit of a checkout copied without .git (recorded in provenance)",
        "suite/settings.py -> suite/bench/provenance.py",
    ),
    Setting(
        "MPCBENCH_SIGNING_KEY",
        "",
        "an ssh-ed25519 public key line or .pub file: its fingerprint goes into each record's provenance "
        "(`signing_key`), binding the records to the entry whose entry.yaml names that key",
        "suite/settings.py -> suite/bench/provenance.py",
    ),
    Setting(
        "MPCBENCH_WIRE_RECORD",
        "",
        "set by `mpcbench verify` on its re-runs (`1`): each torchrun process records its wire for the replay; "
        "not a user setting",
        "suite/pipeline/wire_log.py",
    ),
    Setting(
        "MPCBENCH_WIRE_REPLAY",
        "",
        "set by `mpcbench verify` on a replayed process: the recorded input it is fed; not a user setting",
        "suite/pipeline/wire_log.py",
    ),
    Setting(
        "MPCBENCH_RUN_DIR",
        "",
        "set by the runtime on every torchrun process (the cleanup sweep's marker); not a user setting",
        "suite/pipeline/launch.py",
    ),
    Setting(
        "MPCBENCH_CELL_RESOURCES",
        "",
        "set by `-j`, `pytest -n` and `--executor ray` on each cell: its threads and GPUs (JSON); not a user setting",
        "suite/settings.py -> suite/bench/cell.py, suite/pipeline/worker.py",
    ),
    Setting(
        "MPCBENCH_RESULTS",
        "",
        "results stores the leaderboard app reads (os.pathsep-separated); ci/main.sh's store",
        "leaderboard/app.py, ci/main.sh",
    ),
    Setting(
        "MPCBENCH_RECORDS", "", "records folders the leaderboard app reads (os.pathsep-separated)", "leaderboard/app.py"
    ),
    Setting(
        "MPCBENCH_INDEX_WORKERS",
        "",
        "processes that build the leaderboard index and re-model older records (`1`: in the page's own; "
        "unset: one per CPU once there is enough to do)",
        "leaderboard/index.py, leaderboard/remodel_pool.py",
    ),
    Setting(
        "MPCBENCH_CHROMIUM",
        "",
        "the browser of the leaderboard screenshot and browser test",
        "leaderboard/screenshot.py",
    ),
)
_BY_NAME = {s.name: s for s in SETTINGS}
_FALSE = ("", "0", "false", "no")


def get(name: str) -> str:
    """The variable's value, else its default (``name`` must have a row in :data:`SETTINGS`)."""
    if name not in _BY_NAME:
        raise KeyError(f"{name} is not an mpcbench setting; valid: {', '.join(_BY_NAME)}")
    value = os.environ.get(name)
    return _BY_NAME[name].default if value is None else value


def enabled(name: str) -> bool:
    """A yes/no variable: anything but unset, empty, ``0``, ``false`` or ``no`` is yes."""
    return get(name).strip().lower() not in _FALSE


def usable_cpus() -> int:
    """The cores this process may run on (its affinity mask, else the machine's count): the default
    of the parallelism settings (``MPCBENCH_INDEX_WORKERS``; the cell slots of ``suite.bench.resources``).
    Here, in the leaf every layer may import, so the leaderboard and the runner count alike."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def index_workers() -> int | None:
    """``MPCBENCH_INDEX_WORKERS``: the processes the leaderboard index may use (at least 1), or None
    when unset (one per usable CPU); ValueError naming the value when it is not a number."""
    value = get("MPCBENCH_INDEX_WORKERS").strip()
    if not value:
        return None
    try:
        return max(1, int(value))
    except ValueError:
        raise ValueError(f"MPCBENCH_INDEX_WORKERS must be a number of processes, got {value!r}") from None


def signing_key() -> str:
    """``MPCBENCH_SIGNING_KEY``: the key line (read from the file it names, if it names one), or ""."""
    value = get("MPCBENCH_SIGNING_KEY").strip()
    if value and not value.startswith("ssh-"):
        try:
            value = Path(value).expanduser().read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"MPCBENCH_SIGNING_KEY={value!r}: cannot read the key file ({type(e).__name__})") from None
    return value


def check_consistency() -> bool:
    """``MPCBENCH_CHECK_CONSISTENCY``: the user asks for the consistency check in every run."""
    return enabled("MPCBENCH_CHECK_CONSISTENCY")


def clock() -> str:
    """``MPCBENCH_CLOCK``: ``events`` or ``sync`` (raises ValueError naming the valid values)."""
    mode = get("MPCBENCH_CLOCK")
    if mode not in ("events", "sync"):
        raise ValueError(f"MPCBENCH_CLOCK={mode!r}: valid values are events, sync")
    return mode


def isolation() -> str:
    """``MPCBENCH_ISOLATION``: ``spawn`` for fresh interpreters, anything else forks."""
    return get("MPCBENCH_ISOLATION")


def trace() -> bool:
    """``MPCBENCH_TRACE``: print start-up phase timestamps in torchrun workers."""
    return bool(get("MPCBENCH_TRACE"))


def git_commit() -> str | None:
    """``MPCBENCH_GIT_COMMIT``: the commit of a copied checkout, or None."""
    return get("MPCBENCH_GIT_COMMIT").strip() or None


def cell_resources() -> dict:
    """``MPCBENCH_CELL_RESOURCES``: what the executor gave this cell (``cpu_threads``, ``gpus``,
    ``executor``, ...), or ``{}`` when it runs alone (serial ``mpcbench run``)."""
    import json

    raw = get("MPCBENCH_CELL_RESOURCES").strip()
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
