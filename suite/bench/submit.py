"""``mpcbench submit records/<entry>``: validate an entry, add the baselines it lacks, preview it.

0. write a first ``entry.yaml`` when the folder has none (name, submitter, date, plugin hash);
1. validate the folder as the leaderboard will (:func:`leaderboard.submissions.load_entry`);
2. find the ``none`` baseline cells the entry's records need (same task, tier, seed and run
   setup, on the same machine class: the leaderboard compares an entry only with its own
   baseline) and run the missing ones on this machine into ``<entry>/baselines.jsonl``;
3. screenshot each of the entry's (task, tier) views with ``python -m leaderboard.screenshot``.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from suite.pipeline.config import CellConfig

__all__ = ["Baselines", "missing_baselines", "screenshot_commands", "submit", "write_entry_yaml", "BASELINE_FILE"]

BASELINE_FILE = "baselines.jsonl"


def _plugins_here(plugins: Any, entry: Path) -> tuple[str, ...]:
    """The record's plugins that exist here: files relative to the entry folder (stored paths are
    relative to the results file's folder) or to the checkout, and module names; a plugin task
    needs its plugin for the baseline."""
    out = []
    for p in plugins or ():
        if not isinstance(p, str):
            continue
        if p.endswith(".py") or "/" in p:
            from .store import REPO_ROOT

            found = next((base / p for base in (entry, REPO_ROOT) if (base / p).is_file()), None)
            if found is not None:
                out.append(str(found.resolve()))
        else:
            out.append(p)
    return tuple(out)


def _setup(config: dict[str, Any], entry: Path):
    """The run setup of a record's config as the ``none`` baseline's CellConfig, and the setup's
    identity without plan and plugins (the key that pairs a compressor with its baseline)."""
    from suite.pipeline.config import CellConfig, CompressionPlan

    cfg = CellConfig.from_dict({k: v for k, v in config.items() if k in CellConfig.__dataclass_fields__})
    base = replace(
        cfg, plan=CompressionPlan(), plugins=_plugins_here(cfg.plugins, entry), data_dir=None, check_consistency=False
    )
    ident = base.identity()
    ident.pop("plugins", None)
    return base, ident


@dataclass
class Baselines:
    """The entry's baseline cells: ``to_run`` here, ``elsewhere`` (measured on another machine class)."""

    to_run: list
    elsewhere: list[tuple[str, str]]  # (cell id, the machine class it needs)
    here: str


def missing_baselines(records: list[dict[str, Any]], here: str, entry: Path) -> Baselines:
    """The ``none`` cells missing from ``records`` (an entry's valid records) per run setup and
    machine class; those of this machine class (``here``) can run now."""
    from suite.results.entries import machine_label

    have: set[tuple[str, str]] = set()  # (run setup, machine class)
    need: dict[tuple[str, str], CellConfig] = {}
    for r in records:
        if r.get("status") != "ok" or not isinstance(r.get("config"), dict):
            continue
        try:
            base, ident = _setup(r["config"], entry)
        except (TypeError, ValueError, KeyError):
            continue  # a config this version cannot read: nothing to pair it with
        key = (repr(sorted(ident.items(), key=str)), machine_label(r.get("provenance") or {}))
        if r.get("compressor") == "none":
            have.add(key)
        else:
            need.setdefault(key, base)
    to_run, elsewhere = [], []
    for key, cfg in sorted(need.items(), key=lambda kv: kv[1].cell_id):
        if key in have:
            continue
        if key[1] == here:
            to_run.append(cfg)
        else:
            elsewhere.append((cfg.cell_id, key[1]))
    return Baselines(to_run, elsewhere, here)


def screenshot_commands(
    entry: Path, out_dir: Path, views: list[tuple[str, str]], *, rule: str, network: str
) -> list[list[str]]:
    """One ``python -m leaderboard.screenshot`` command per (task, tier) view of the entry."""
    return [
        [
            sys.executable,
            "-m",
            "leaderboard.screenshot",
            str(out_dir / f"{entry.name}-{task}-{tier}.png"),
            "--records",
            str(entry.parent),
            "--task",
            task,
            "--tier",
            tier,
            "--rule",
            rule,
            "--network",
            network,
            "--entry",
            entry.name,
        ]
        for task, tier in views
    ]


def write_entry_yaml(entry: Path) -> Path:
    """A first ``entry.yaml``: the folder's name, the git user (else $USER), today's date, and
    ``plugin.py`` with its hash when the folder has one (the fields: records/README.md)."""
    import datetime
    import getpass
    import json as _json

    from leaderboard.submissions import plugin_file_hash

    try:
        who = subprocess.run(["git", "config", "user.name"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        who = ""
    lines = [
        f"name: {_json.dumps(entry.name)}",
        f"submitter: {_json.dumps(who or getpass.getuser())}",
        f'date: "{datetime.date.today().isoformat()}"',
    ]
    if (entry / "plugin.py").is_file():
        lines += ["plugin: plugin.py", f"plugin_hash: {plugin_file_hash(entry / 'plugin.py')}"]
    path = entry / "entry.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def submit(
    entry: Path,
    *,
    out_dir: Path,
    rule: str,
    network: str,
    baselines: bool = True,
    screenshots: bool = True,
    progress: bool = True,
    say: Callable[[str], None] = lambda s: print(s, file=sys.stderr),
) -> int:
    """The three steps; returns the exit code (0 done, 1 a problem, a failed baseline or screenshot)."""
    from leaderboard.submissions import load_entry
    from suite.results.entries import machine_label

    from .matrix import PlannedCell, missing_device
    from .provenance import machine_info
    from .runner import run_cells
    from .store import ResultsStore

    if screenshots:  # what the last step needs, checked before the baselines take minutes to run
        from leaderboard.screenshot import find_chromium

        if find_chromium() is None:
            say(
                "mpcbench submit: the previews need chromium, which is not found: install it "
                "(apt-get install -y chromium) or set MPCBENCH_CHROMIUM, or pass --no-screenshots; nothing was run"
            )
            return 1
    if not (entry / "entry.yaml").exists():
        say(f"mpcbench submit: wrote {write_entry_yaml(entry)}: check name and submitter, add a description")
    records, problems = load_entry(entry)
    for p in problems:
        print(p)
    if problems:
        say(f"mpcbench submit: {entry}: {len(problems)} problem(s) (listed above); fix them, then run this again")
        return 1
    ok = [r for r in records if r.get("status") == "ok"]
    if not ok:
        say(f"mpcbench submit: {entry}: no ok records yet; run your cells with --results {entry / 'results.jsonl'}")
        return 1
    say(f"mpcbench submit: {entry}: valid ({len(records)} records, {len(ok)} ok)")

    rc = 0
    if baselines:
        here = machine_label({"machine": machine_info()})
        need = missing_baselines(records, here, entry)
        for cell_id, machine in need.elsewhere:
            say(
                f"  baseline {cell_id} is missing for records measured on {machine}; this machine is {here}: "
                "run `mpcbench submit` there"
            )
        if need.to_run:
            from .provenance import check_signing_key

            check_signing_key()  # a bad MPCBENCH_SIGNING_KEY: one line before the cells, not a failure each
            cells = [PlannedCell(c, test_id=c.cell_id) for c in need.to_run]
            if missing := next((m for c in cells if (m := missing_device(c))), None):
                say(f"mpcbench submit: {missing}")
                return 1
            store = ResultsStore(entry / BASELINE_FILE)
            say(f"  running {len(cells)} missing baseline cell(s) on this machine into {store.path}")
            outcomes = run_cells(cells, store, progress=progress)
            bad = [o for o in outcomes if o.status in ("failed", "timeout")]
            for o in bad:
                say(f"  {o.status}: {o.cell.test_id}: {o.reason}")
            rc = 1 if bad else rc
            records, problems = load_entry(entry)  # the entry as the leaderboard will now read it
            if problems:
                for p in problems:
                    print(p)
                return 1
        elif not need.elsewhere:
            say("  baselines: every record has its none baseline on its machine")
    if screenshots:
        views = sorted({(r["task"], r["tier"]) for r in records if r.get("status") == "ok"})
        out_dir.mkdir(parents=True, exist_ok=True)
        for (task, tier), cmd in zip(views, screenshot_commands(entry, out_dir, views, rule=rule, network=network)):
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode == 0:
                say(f"  preview {task} / {tier}: {cmd[3]}")
            else:
                last = (r.stderr.strip() or r.stdout.strip() or f"exit {r.returncode}").splitlines()[-1]
                say(f"  preview {task} / {tier} failed: {last}")
                rc = 1
    if rc == 0:
        # the page opens on the entry's own task, tier and setup with its rows highlighted (leaderboard/app.py)
        say(f"  see it: streamlit run leaderboard/app.py, then open http://localhost:8501/?entry={entry.name}")
        say(f"mpcbench submit: ready; open a pull request adding {entry}/")
    return rc
