"""The ``mpcbench`` command: list, run, report, validate.

    mpcbench list [compressors|tasks|tiers]
    mpcbench run --tier quick                                  # the quick matrix
    mpcbench run --task cifar10 --compressor "topk(ratio=0.1)" # one compressor (+ none baseline)
    mpcbench run --task sst2 --forward "quant(bits=4)" --backward "quant(bits=8)" --seeds 3
    mpcbench run --mode torchrun --task shakespeare --compressor fp8 --stages 4
    mpcbench run --link 100Mbps --task shakespeare --compressor fp8   # emulated hosts (root)
    mpcbench links --task shakespeare --compressor none --link 1Gbps --link 20mbit   # measured vs modeled
    mpcbench report --network 1Gbps
    mpcbench compare records/mine/results.jsonl --fail-above 0.02   # against the maintainers' rows (CI)
    mpcbench validate results/store.jsonl    # or records/<entry>/, or a matrix .yaml

Exit codes: 0 success; 1 a cell failed / a file has problems; 2 bad command line or config
(one line on stderr, before any training); 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any, Sequence

from suite.results import DEFAULT_STORE

from .options import RUN_OPTIONS, Choices, Option, add_to_argparse

__all__ = ["main", "build_parser"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
# matrix_file.MATRIX_PATH, named here without that module's torch import (names are checked before it)
MATRIX_YAML = Path(__file__).with_name("matrix.yaml")


class UsageError(Exception):
    """A bad command line or configuration: printed as one line, exit code 2."""


def _err(msg: str) -> None:
    print(f"mpcbench: error: {msg}", file=sys.stderr)


# --------------------------------------------------------------------------- list
def _load_plugins(plugins: Sequence[str]) -> None:
    from compressors.api import CompressorError
    from compressors.registry import load_plugin

    for p in plugins:
        try:
            load_plugin(p)
        except CompressorError as e:
            print(f"  ! {e}", file=sys.stderr)


def _fmt_params(name: str) -> str:
    """``ratio=0.1, inner=<required>`` from the constructor signature (None defaults shown as none)."""
    import inspect

    from compressors.registry import get_class

    parts = []
    for p in inspect.signature(get_class(name).__init__).parameters.values():
        if p.name == "self" or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        if p.default is inspect.Parameter.empty:
            parts.append(f"{p.name}=<required>")
        else:
            v = p.default
            parts.append(f"{p.name}={'none' if v is None else str(v).lower() if isinstance(v, bool) else v}")
    return ", ".join(parts) or "(no parameters)"


_LISTS = ("compressors", "tasks", "tiers")


def _list_what(value: str) -> str:
    if value not in _LISTS:
        raise argparse.ArgumentTypeError(f"unknown {value!r}: choose from {', '.join(_LISTS)}")
    return value


def cmd_list(args: argparse.Namespace) -> int:
    _load_plugins(args.plugin)
    what = args.what or list(_LISTS)
    for w in what:
        {"compressors": _list_compressors, "tasks": _list_tasks, "tiers": _list_tiers}[w](args)
    return EXIT_OK


def _list_compressors(args: argparse.Namespace) -> None:
    from compressors.registry import available, describe, plugin_errors

    names = available()
    print(f"compressors ({len(names)}):")
    for n in names:
        d = describe(n)
        origin = "" if d["module"].startswith("compressors.builtins") else f"  [plugin: {d['module']}]"
        print(f"  {n:<10} {d['summary']}{origin}")
        print(f"  {'':<10}   params: {_fmt_params(n)}")
        req = f"; requires: {', '.join(d['requires'])}" if d["requires"] else ""
        flags = [f for f in ("linear", "differentiable") if d[f]]
        print(f"  {'':<10}   roles: {', '.join(d['roles'])}{req}{'; ' + ', '.join(flags) if flags else ''}")
    broken = plugin_errors()
    if broken:
        print(f"broken plugins ({len(broken)}), not usable until fixed:")
        for name, err in sorted(broken.items()):
            print(f"  {name:<10} {err}")
    print()


def _list_tasks(args: argparse.Namespace) -> None:
    from tasks import available_tasks, get_task_class

    names = available_tasks()
    print(f"tasks ({len(names)}):")
    for n in names:
        try:
            cls = get_task_class(n)
        except Exception as e:  # noqa: BLE001 - one broken task must not hide the others
            print(f"  {n:<12} ! cannot load: {type(e).__name__}: {' '.join(str(e).split())}")
            continue
        metric = f"{cls.metric.name} ({'higher' if cls.metric.higher_is_better else 'lower'} is better)"
        import inspect
        import textwrap

        paragraphs = (inspect.getdoc(cls) or "").split("\n\n")
        print(f"  {n:<12} {paragraphs[0].strip()}")
        if len(paragraphs) > 1:  # the second paragraph: what crosses the boundaries, what the tiers change
            for line in textwrap.wrap(" ".join(paragraphs[1].split()), 100):
                print(f"  {'':<12}   {line}")
        print(
            f"  {'':<12}   metric: {metric}; stages: {cls.default_stages} (choices {', '.join(map(str, cls.stage_choices))})"
            + (f"; features: {', '.join(sorted(cls.features))}" if cls.features else "")
        )
        budgets = "; ".join(f"{t}: {b.steps} steps x {b.batch_size}, target {b.target:g}" for t, b in cls.tiers.items())
        for line in textwrap.wrap(f"tiers: {budgets}", 100, subsequent_indent="  "):
            print(f"  {'':<12}   {line}")
        if cls.model_sizes:  # named model sizes (--model-size): what each overrides of a tier's model
            sizes = "; ".join(
                f"{k} ({', '.join(f'{a}={b}' for a, b in v.items())})" for k, v in cls.model_sizes.items()
            )
            for line in textwrap.wrap(f"model sizes: {sizes}", 100, subsequent_indent="  "):
                print(f"  {'':<12}   {line}")
    print()


def _list_tiers(args: argparse.Namespace) -> None:
    from .matrix import load_matrix

    m = load_matrix(args.matrix)
    print(f"tiers ({m.source}):")
    for t in m.tiers.values():
        seeds = ",".join(map(str, t.seeds))
        print(
            f"  {t.name:<6} {len(t.tasks)} tasks x {len(t.entries)} compressor entries x {len(t.seeds)} seed(s) "
            f"(seeds {seeds}); cell time limit {t.cell_timeout_s:g} s"
            + (f"; the {t.budget} tier's budget" if t.budget else "")
        )
        if t.description:
            print(f"  {'':<6} {t.description}")
        print(f"  {'':<6} tasks: {', '.join(t.tasks)}")
        print(f"  {'':<6} compressors: {', '.join(map(_entry_label, t.entries))}")
    print()


def _entry_label(e) -> str:
    """An entry's plan, with the tasks it is limited to: ``topk [cola, mrpc]``, ``fp16 [not cola]``."""
    where = f" [{', '.join(e.tasks)}]" if e.tasks is not None else ""
    where += f" [not {', '.join(e.except_tasks)}]" if e.except_tasks else ""
    return e.plan.label + where


# --------------------------------------------------------------------------- run
def _selection(args: argparse.Namespace):
    """The :class:`suite.bench.options.Selection` of ``mpcbench run``'s arguments."""
    from .options import selection_from

    return selection_from(vars(args), Path.cwd())


def _executor(args: argparse.Namespace):
    """The executor of ``-j`` / ``--executor`` (``suite.bench.executors``); a bad value is a usage error."""
    from .executors import make_executor

    try:
        return make_executor(args.executor, args.jobs, address=args.address, cpus_per_cell=args.cpus_per_cell)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _check_names(what: str, wanted: Sequence[str], known: Sequence[str], valid: str = "valid") -> None:
    """A name nothing defines is a typo: one line with the closest valid name and the list (``valid``:
    the list's lead-in), read from plain files, never importing torch: it answers in well under a second."""
    if unknown := [w for w in wanted if w not in known]:
        import difflib  # compressors.api's did_you_mean would import torch

        close = difflib.get_close_matches(unknown[0], list(known), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UsageError(f"unknown {what} {unknown[0]!r}{hint}; {valid}: {', '.join(known)}")


def _check_run_names(args: argparse.Namespace) -> None:
    """``run``'s task and tier names, before the fork server and the planning import torch (a typo
    took 25 s to answer at load 11-25). A ``--plugin`` may register tasks: then the planner decides."""
    if not args.plugin:
        if (loaded := sys.modules.get("tasks")) is not None:  # imported already: registered tasks count too
            tasks = list(loaded.available_tasks())
        else:
            from suite.results.task_catalog import catalog

            tasks = sorted(catalog())
        _check_names("task", list(args.task or ()), tasks, "valid tasks")
    tiers = _tier_names(Path(args.matrix) if args.matrix else MATRIX_YAML)
    if tiers:
        _check_names("tier", [args.tier], tiers, "valid tiers")


def cmd_run(args: argparse.Namespace) -> int:
    _check_run_names(args)
    if args.jobs is None:  # as many cells at once as the cores allow (Ray keeps its own default)
        from .resources import default_jobs

        args.jobs = default_jobs() if args.executor == "local" else 1
    if args.jobs < 1:
        raise UsageError(f"-j/--jobs must be at least 1, got {args.jobs}")
    if args.address and args.executor != "ray":
        raise UsageError("--address names a Ray cluster: add --executor ray")
    if not args.dry_run and args.executor == "local":  # the fork server imports torch beside the planning below
        from .forkserver import prestart
        from .resources import Slot

        pinned = Slot("local", args.jobs, 1).env() if args.jobs > 1 else None  # -j cells fork from one server
        prestart(tuple(args.task or ()), pinned)
    from .matrix import MatrixError, missing_device, plan_cells
    from .plugins import refuse_unimportable
    from .provenance import check_signing_key
    from .runner import cell_state, run_cells
    from .store import ResultsStore

    check_signing_key()  # a bad MPCBENCH_SIGNING_KEY: one line now, not a failure per cell
    selection = _selection(args)
    refuse_unimportable(selection.plugins)  # exit 2 before anything trains
    cells = plan_cells(selection)
    store = ResultsStore(args.results)
    if not args.dry_run:
        for line in store.recover():  # records a full disk kept aside last time (StoreError: the spool)
            print(f"mpcbench: {line}", file=sys.stderr)
    runnable = [c for c in cells if c.runnable]
    done = store.done_keys()
    todo = [c for c in runnable if c.config.key() not in done]
    if not args.dry_run and (missing := next((m for c in todo if (m := missing_device(c))), None)):
        raise MatrixError(missing)
    print(
        f"mpcbench: tier {args.tier}: {len(cells)} cells ({len(todo)} to run, {len(runnable) - len(todo)} already in "
        f"store, {len(cells) - len(runnable)} not applicable or broken) -> {store.path}"
        + ("; sender/receiver consistency check on" if args.check_consistency else ""),
        file=sys.stderr,
    )
    if args.dry_run:
        for c in cells:
            print(f"{c.test_id}  [{c.config.key()}]  {cell_state(c, done)}")
        return EXIT_OK
    if todo:
        store.check_writable()  # a read-only or unwritable location: one line now, not after the first cell
    if args.executor == "local" and todo:
        print(f"mpcbench: {args.jobs} cell(s) at once (-j N to change)", file=sys.stderr)
    tasks = sorted({c.config.task for c in runnable})
    tier = cells[0].config.tier if cells else args.tier

    def round_report(done: int, last: int) -> None:
        # a ranking as soon as a round of the breadth-first order is in; the last round ends with the summary
        if args.no_round_reports:
            return
        if done != last:
            print(f"\n== ranking after round {done + 1} of {last + 1} (mpcbench report --results {store.path})")
            _print_report([str(store.path)], tier, tasks)
        elif last > 0:  # the last round: the summary below is its report (a "round 1 of 2" needs its round 2)
            print(
                f"\n== round {done + 1} of {last + 1} done: the summary of this run follows "
                f"(the whole ranking: mpcbench report --results {store.path})"
            )

    outcomes = run_cells(cells, store, progress=not args.no_progress, executor=_executor(args), on_round=round_report)
    if any(o.record for o in outcomes):
        _print_summary(store.path, [c.config.key() for c in runnable])
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.status] = counts.get(o.status, 0) + 1
    print(
        "mpcbench: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) + f"; store: {store.path}",
        file=sys.stderr,
    )
    bad = [o for o in outcomes if o.status in ("failed", "timeout")]
    for o in bad:
        print(f"  {o.status}: {o.cell.test_id}: {o.reason}", file=sys.stderr)
    if bad:
        print(f"  logs: {store.log_dir}", file=sys.stderr)
    return EXIT_FAILED if bad else EXIT_OK


def _print_report(stores: list[str], tier: str, tasks: list[str]) -> None:
    """``mpcbench report`` of ``stores`` for one tier and these tasks, to stdout (never fails the run)."""
    from leaderboard.index import load_index
    from leaderboard.report import ReportOptions, write_report

    try:
        frame = load_index(stores, []).frame
        frame = frame[(frame["tier"] == tier) & frame["task"].isin(tasks)]
        if not frame.empty:
            write_report(frame, ReportOptions(), sys.stdout)
    except Exception as e:  # noqa: BLE001 - a report is a courtesy here: the cells go on
        print(f"mpcbench: no report this round ({type(e).__name__}: {' '.join(str(e).split())[:200]})", file=sys.stderr)
    sys.stdout.flush()


def _print_summary(store: Path, keys: list[str]) -> None:
    """The closing summary of a run: quality vs none, compression ratio, time-to-target of its cells."""
    from leaderboard.index import load_index
    from leaderboard.report import write_summary

    try:
        write_summary(load_index([str(store)], []).frame, set(keys), sys.stdout)
    except Exception as e:  # noqa: BLE001 - the records are stored; only the summary is lost
        print(f"mpcbench: no summary ({type(e).__name__}: {' '.join(str(e).split())[:200]})", file=sys.stderr)
    sys.stdout.flush()


# --------------------------------------------------------------------------- links
def cmd_links(args: argparse.Namespace) -> int:
    """Run the selected cells once per ``--link`` (skipping stored ones), then print measured vs modeled."""
    from .links import format_rows, link_rows
    from .store import ResultsStore, read_jsonl

    if not args.links:
        raise UsageError("give at least one --link (a network profile such as 100Mbps or a rate such as 20mbit)")
    rc = EXIT_OK
    keys: set[str] = set()
    for link in args.links:
        args.link = link
        if not args.report_only:
            rc = max(rc, cmd_run(args))
        from .matrix import plan_cells

        keys |= {c.config.key() for c in plan_cells(_selection(args)) if c.runnable}
    if args.dry_run:
        return rc
    records = [r for r in ResultsStore(args.results).records() if r.get("cell_key") in keys]
    references: list = []
    for ref in args.reference:
        path = Path(ref)
        for f in sorted(path.glob("*.jsonl")) if path.is_dir() else [path]:
            references += read_jsonl(f)[0]
    print(format_rows(link_rows(records, references)))
    return rc


# --------------------------------------------------------------------------- check
def _plugin_target(raw: str) -> str:
    """A plugin argument as ``load_plugin`` takes it: a ``.py`` file (absolute) or a module name.

    A package folder (with ``__init__.py``) or a project folder holding exactly one package
    (``examples/mpcbench-signsgd``) is imported by its package name, its parent put on ``sys.path``.
    """
    path = Path(raw)
    if not path.is_dir():
        return str(path.resolve()) if (raw.endswith(".py") or "/" in raw) else raw
    if (path / "__init__.py").exists():
        package = path.resolve()
    else:
        found = [
            d
            for base in (path, path / "src")
            if base.is_dir()
            for d in sorted(base.iterdir())
            if (d / "__init__.py").exists() and not d.name.startswith(("test", "."))
        ]
        if len(found) != 1:
            listed = ", ".join(d.name for d in found) or "none"
            raise UsageError(
                f"{raw}: a plugin folder must hold exactly one Python package (found: {listed}); "
                "name the module or the .py file instead"
            )
        package = found[0].resolve()
    if str(package.parent) not in sys.path:
        sys.path.insert(0, str(package.parent))
    return package.name


def cmd_check(args: argparse.Namespace) -> int:
    import importlib.metadata

    import pytest

    import compressors
    from compressors.registry import load_plugin

    target = _plugin_target(args.plugin)
    load_plugin(target)  # an import failure is one line and exit 2, before pytest starts
    argv = [
        str(Path(compressors.__file__).with_name("contract.py")),
        "-p",
        "no:cacheprovider",
        "-v",
        "-rfEs",
        "--tb=short",
        "--mpcbench-plugin",  # the plugin's own spelling: this runs in the author's directory, not the checkout
        target,
    ]
    for spec in args.spec:
        argv += ["--mpcbench-compressor", spec]
    if not any(ep.name == "mpcbench" for ep in importlib.metadata.entry_points(group="pytest11")):
        argv += ["-p", "suite.bench.pytest_plugin"]  # not pip-installed: the options come from here
    print(
        f"mpcbench check: the generic compressor contract on {args.plugin}"
        + (f" ({', '.join(args.spec)})" if args.spec else " (every compressor it registers)"),
        file=sys.stderr,
    )
    return int(pytest.main(argv + list(args.pytest_args)))


# --------------------------------------------------------------------------- submit
def cmd_submit(args: argparse.Namespace) -> int:
    from .submit import submit

    entry = Path(args.entry)
    if not entry.is_dir():
        raise UsageError(f"{entry}: no such entry folder (records/<entry>/ with entry.yaml and results *.jsonl)")
    return submit(
        entry,
        out_dir=Path(args.out),
        rule=args.rule,
        network=args.network,
        baselines=not args.no_baselines,
        screenshots=not args.no_screenshots,
        progress=not args.no_progress,
    )


# --------------------------------------------------------------------------- report
def _load_for_report(args: argparse.Namespace) -> tuple[Any, list[str], Any]:
    """The records' rows from the leaderboard's compact index (rebuilt for changed sources only), the
    problems, and the index (its ``heavy`` rows carry the timing inputs)."""
    from leaderboard.index import load_index
    from suite.results import COMMITTED_RECORDS

    records = list(args.records)
    if getattr(args, "default_sources", False) and not records and COMMITTED_RECORDS.is_dir():
        records = [str(COMMITTED_RECORDS)]  # no source named: the local store and the committed records
    stores = [p for p in args.results if Path(p).exists()]
    missing = [p for p in args.results if not Path(p).exists()]
    index = load_index(stores, records)
    msgs = [str(p) for p in index.problems] + [f"{p}: no such results file" for p in missing if not records]
    return index.frame, msgs, index


def _tier_names(path: Path) -> list[str]:
    """The tier names of a matrix file in its order, read as plain YAML (the report stays torch-free)."""
    import yaml

    try:
        return list((yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("tiers") or {})
    except (OSError, UnicodeDecodeError, yaml.YAMLError, AttributeError, TypeError):
        return []  # the matrix loader says what is wrong with the file, in one line


def cmd_report(args: argparse.Namespace) -> int:
    from leaderboard.report import ReportOptions, linked_records, write_report
    from leaderboard.safe_text import plain

    from .links import format_rows, link_rows

    frame, problems, index = _load_for_report(args)
    for p in problems:
        print(f"skipped: {plain(p)}", file=sys.stderr)
    for what, wanted in (("task", args.task), ("tier", args.tier)):
        # a name no record has and no task module defines is a typo, not "no records yet"
        known = set(frame[what].dropna().astype(str)) if what in frame else set()
        if what == "task":
            from suite.results.task_catalog import catalog

            known |= set(catalog())
        else:
            known |= set(_tier_names(MATRIX_YAML))
        _check_names(what, wanted, sorted(known))
        if wanted:
            frame = frame[frame[what].isin(wanted)]
    if frame.empty:
        print(
            "no records to report (run `mpcbench run --tier quick` first, or name sources: --results STORE, "
            "--records DIR)",
            file=sys.stderr,
        )
        return EXIT_FAILED
    if args.claims:  # the seed papers' claims and their verdicts
        from leaderboard.report import write_claims

        write_claims(frame, args.format, sys.stdout, tasks=args.task, tiers=args.tier)
        return EXIT_OK
    if args.bandwidth:  # the link each entry needs for 50/90/99 % compute utilization
        from leaderboard.bandwidth import write_bandwidth
        from leaderboard.index import load_details

        write_bandwidth(load_details(frame[(frame["status"] == "ok") & frame["latest"]]), args.format, sys.stdout)
        return EXIT_OK
    if args.hardware or args.model_size or args.mfu is not None:  # projected onto another accelerator / size
        return _report_projected(args, frame)
    if args.score:  # one score across tasks and networks (performance profiles)
        from leaderboard.report import write_score

        for tier in args.tier or ["quick"]:
            write_score(frame, args.format, sys.stdout, tier=tier)
        return EXIT_OK
    opts = ReportOptions(
        rule=args.rule,
        network=args.network,
        direction=args.direction,
        min_ratio=args.min_ratio,
        format=args.format,
        wide=args.wide,
    )
    rows = link_rows(linked_records(frame)) if args.format != "csv" else []  # runs over real or emulated links
    try:
        timed = index.heavy(frame[(frame["status"] == "ok") & frame["latest"]]) if args.format != "csv" else None
        write_report(frame, opts, sys.stdout, links_text=format_rows(rows) if rows else "", timed=timed)
    except ValueError as e:
        raise UsageError(str(e)) from None
    return EXIT_OK


def _projection(args: argparse.Namespace) -> Any:
    """The report's :class:`Projection` from ``--hardware``, ``--model-size`` and ``--mfu`` (checked: one line each)."""
    from suite.results.hardware import HardwareError, load_hardware
    from suite.results.model_sizes import ModelSizeError, load_model_costs
    from suite.results.projection import Projection

    try:
        profiles = load_hardware()
        costs = load_model_costs()[0]
    except (HardwareError, ModelSizeError) as e:
        raise UsageError(str(e)) from None
    names = list(profiles)
    if not args.hardware:
        raise UsageError(f"--model-size and --mfu project onto a profile: add --hardware NAME ({', '.join(names)})")
    if args.hardware not in names:
        raise UsageError(f"unknown hardware profile {args.hardware!r}; valid: {', '.join(names)}")
    sizes = sorted({c.model_size for c in costs if c.model_size})
    if args.model_size is not None and args.model_size not in sizes:
        raise UsageError(f"unknown model size {args.model_size!r}; valid: {', '.join(sizes)}")
    if args.mfu is not None and not 0 < args.mfu <= 1:
        raise UsageError(f"--mfu must be a fraction of the profile's peak in (0, 1], got {args.mfu}")
    projection = Projection(args.hardware, args.model_size, args.mfu)
    try:
        projection.describe()  # a profile without the numbers a projection needs (an uncalibrated machine)
    except HardwareError as e:
        raise UsageError(str(e)) from None
    return projection


def _report_projected(args: argparse.Namespace, frame: Any) -> int:
    """``mpcbench report --hardware NAME [--model-size NAME] [--mfu X]`` (leaderboard.projected)."""
    from leaderboard.index import load_details
    from leaderboard.networks import Link
    from leaderboard.projected import write_projection
    from leaderboard.report import default_network
    from suite.results.network import PROFILES

    projection = _projection(args)
    network = args.network or default_network(frame) or "1Gbps"
    if network not in PROFILES:
        raise UsageError(f"unknown network profile {network!r}; valid: {', '.join(PROFILES)}")
    prof = PROFILES[network]
    ok = frame[(frame["status"] == "ok") & frame["latest"]]
    rows = load_details(ok, projection)
    write_projection(rows, projection, Link(float(prof.bandwidth_bps), float(prof.latency_s)), args.format, sys.stdout)
    return EXIT_OK


# --------------------------------------------------------------------------- compare
def cmd_compare(args: argparse.Namespace) -> int:
    """A store's rows against the maintainers' rows of the same task, tier and setup (leaderboard.compare)."""
    store = Path(args.store)
    if not store.is_file():
        raise UsageError(f"{store}: no such results store (a .jsonl file written by mpcbench run --results)")
    if args.fail_above is not None and not args.fail_above >= 0:
        raise UsageError(f"--fail-above must be a non-negative difference in the task's metric, got {args.fail_above}")
    from leaderboard.compare import compare, write_compare
    from leaderboard.frame import MAINTAINERS
    from leaderboard.index import load_index
    from leaderboard.networks import network_profiles
    from leaderboard.report import default_network
    from leaderboard.safe_text import plain
    from suite.results import COMMITTED_RECORDS

    records = Path(args.records) if args.records else COMMITTED_RECORDS
    if not (records / MAINTAINERS).is_dir():
        raise UsageError(f"{records}: no {MAINTAINERS}/ folder in it (--records names the records/ folder holding it)")
    mine = load_index([str(store)], [])
    for p in mine.problems:
        print(f"skipped: {plain(p)}", file=sys.stderr)
    if mine.frame.empty or not (mine.frame["status"] == "ok").any():
        raise UsageError(f"{store}: no ok records to compare (run cells into it with mpcbench run --results {store})")
    theirs = load_index([], [str(records)]).frame
    profiles = network_profiles(mine.frame)
    network = args.network or default_network(mine.frame)
    if args.network and args.network not in profiles:
        raise UsageError(
            f"unknown network {args.network!r} for {store}; valid: {', '.join(profiles) or 'none modeled'}"
        )
    result = compare(mine.frame, theirs, network=network, fail_above=args.fail_above)
    write_compare(result, sys.stdout)
    if result.table.empty:
        raise UsageError(
            f"{store}: no row has a maintainers' row of the same task, tier and setup to compare with "
            "(the maintainers ran the quick tier: mpcbench run --tier quick)"
        )
    return EXIT_FAILED if result.failed else EXIT_OK


# --------------------------------------------------------------------------- validate
def cmd_validate(args: argparse.Namespace) -> int:
    bad = 0
    for raw in args.path:
        path = Path(raw)
        if path.suffix in (".yaml", ".yml") and path.name != "entry.yaml":
            problems, n = _validate_matrix(path)
            what = "matrix"
        elif path.is_dir():
            from leaderboard.submissions import load_entries, load_entry

            # an entry folder has entry.yaml or results files; anything else is a records/ root
            if (path / "entry.yaml").exists() or any(p.suffix == ".jsonl" for p in path.iterdir()):
                records, probs = load_entry(path)
            else:
                records, probs = load_entries(path)
            problems, n, what = [str(p) for p in probs], len(records), "records"
        elif path.exists():
            from .store import ResultsStore, StoreError, read_jsonl

            with contextlib.suppress(StoreError):
                for line in ResultsStore(path).recover():  # a record a full disk kept aside
                    print(f"mpcbench: {line}", file=sys.stderr)
            records, problems = read_jsonl(path)
            problems = [f"{path}: {p}" for p in problems]
            n, what = len(records), "records"
        else:
            problems, n, what = [f"{path}: no such file or folder"], 0, "records"
        from leaderboard.safe_text import plain

        for p in problems:
            print(plain(p))
        bad += len(problems)
        state = "OK" if not problems else f"{len(problems)} problem(s)"
        print(f"{raw}: {state}; {n} valid {what}", file=sys.stderr)
    return EXIT_FAILED if bad else EXIT_OK


def _validate_matrix(path: Path) -> tuple[list[str], int]:
    from .matrix import MatrixError, Selection, load_matrix, plan_cells

    try:
        m = load_matrix(path)
    except MatrixError as e:
        return [str(e)], 0
    problems, n = [], 0
    for name in m.tiers:
        try:
            n += len(plan_cells(Selection(tier=name, matrix_path=str(path)), m))
        except MatrixError as e:
            problems.append(f"{path}: {e}")
    return problems, n


# --------------------------------------------------------------------------- parser
def _rules() -> list[str]:
    from leaderboard.ranking import RULES

    return list(RULES)


RULE_CHOICES = Choices(_rules)  # the ranking rules, read from leaderboard.ranking when needed
# options of ``mpcbench run`` that pytest has its own way of doing (-q, -rs)
CLI_RUN_OPTIONS = (
    Option("--no-progress", None, bool, help="plain lines instead of a progress bar"),
    Option("--no-round-reports", None, bool, help="no ranking after each round of the breadth-first order"),
)


def _add_executor_options(p: argparse.ArgumentParser) -> None:
    """Where ``mpcbench run``'s cells run (``pytest suite`` spreads them with pytest-xdist's ``-n``)."""
    g = p.add_argument_group("executor (docs/performance.md: what runs side by side measures)")
    g.add_argument(
        "-j",
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help="cells at once on this machine, each pinned to cores/N torch threads and its GPUs (default: one per "
        "core, as memory allows; -j 1: one at a time with the machine to itself); "
        "with --executor ray and no --address: the local cluster's CPUs",
    )
    g.add_argument(
        "--executor",
        default="local",
        choices=["local", "ray"],
        help="local: this machine (default); ray: cells as Ray tasks (pip install -e '.[ray]')",
    )
    g.add_argument(
        "--address", default=None, help="the Ray cluster to join (e.g. auto, HOST:6379); default: start a local one"
    )
    g.add_argument(
        "--cpus-per-cell",
        type=int,
        default=None,
        metavar="N",
        help="CPUs (torch threads) per cell (default: cores/N, at most $OMP_NUM_THREADS; Ray: 1)",
    )


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="mpcbench",
        description="Benchmark compressors of activations and gradients in pipeline- and data-parallel training.",
    )
    sub = ap.add_subparsers(
        dest="command", required=True, metavar="{list,run,links,check,submit,report,compare,validate,verify}"
    )

    p = sub.add_parser("list", help="list compressors, tasks and tiers")
    # not `choices=`: with nargs="*" Python 3.11's argparse checks the empty default against them
    p.add_argument(
        "what", nargs="*", type=_list_what, metavar="{compressors,tasks,tiers}", help="what to list (default: all)"
    )
    p.add_argument(
        "--plugin", action="append", default=[], help="plugin module or .py file to import first (repeatable)"
    )
    p.add_argument("--matrix", default=None, help="matrix YAML (default suite/bench/matrix.yaml)")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("run", help="run one cell or a matrix into the results store")
    add_to_argparse(p, RUN_OPTIONS + CLI_RUN_OPTIONS)  # the same table as pytest suite's options
    _add_executor_options(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "links", help="run cells over emulated links (--link, repeatable) and print measured vs modeled times"
    )
    add_to_argparse(p, tuple(o for o in RUN_OPTIONS if o.flag != "--link") + CLI_RUN_OPTIONS)
    p.add_argument(
        "--link",
        dest="links",
        action="append",
        default=[],
        metavar="LINK",
        help="a network profile or rate to run every selected cell over (repeatable)",
    )
    p.add_argument(
        "--reference",
        action="append",
        default=[],
        metavar="STORE",
        help="results store or records folder with full-length runs: their steps to target give the "
        "time to target of shortened runs (repeatable)",
    )
    p.add_argument("--report-only", action="store_true", help="print the table from the store, run nothing")
    # one cell at a time: a link's measured step time is the point, and cells side by side would share it
    p.set_defaults(func=cmd_links, link=None, jobs=1, executor="local", address=None, cpus_per_cell=None)

    p = sub.add_parser("check", help="run the generic compressor contract (pytest) on a plugin")
    p.add_argument("plugin", help="the plugin: a .py file, a module name, or a package / project folder")
    p.add_argument(
        "spec",
        nargs="*",
        help="specs to test (default: every compressor the plugin registers, at its default settings)",
    )
    p.add_argument(
        "--pytest",
        dest="pytest_args",
        action="append",
        default=[],
        metavar="ARG",
        help="pass ARG to pytest (repeatable), e.g. --pytest=-x --pytest=-v",
    )
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("submit", help="validate records/<entry>, run the none baselines it lacks, screenshot its views")
    p.add_argument("entry", help="the entry folder, records/<entry>")
    p.add_argument("--out", default="results/preview", help="where the screenshots go (default results/preview)")
    p.add_argument(
        "--rule",
        default="time_to_target",
        choices=RULE_CHOICES,
        metavar="RULE",
        help="ranking rule of the screenshots: %(choices)s (default time_to_target)",
    )
    p.add_argument("--network", default="1Gbps", help="network of the screenshots (default 1Gbps)")
    p.add_argument("--no-baselines", action="store_true", help="do not run missing none baselines")
    p.add_argument("--no-screenshots", action="store_true", help="validate (and run baselines) only")
    p.add_argument("--no-progress", action="store_true", help="plain lines instead of a progress bar")
    p.set_defaults(func=cmd_submit)

    p = sub.add_parser("report", help="ranked table per task and tier")
    p.add_argument(
        "--results",
        action="append",
        default=None,
        help=f"results store(s) (default: {DEFAULT_STORE} if present, and the checkout's records/)",
    )
    p.add_argument(
        "--records",
        action="append",
        default=[],
        help="read submissions from this records/ folder (default: the checkout's, when no source is named)",
    )
    p.add_argument("--task", action="append", default=[])
    p.add_argument("--tier", action="append", default=[])
    p.add_argument("--network", default=None, help="network profile for modeled time-to-target (default 1Gbps)")
    p.add_argument(
        "--rule",
        default="time_to_target",
        choices=RULE_CHOICES,
        metavar="RULE",
        help="%(choices)s (default time_to_target: which compressor reaches the task's target first over --network)",
    )
    p.add_argument(
        "--wide",
        action="store_true",
        help="every column (default: the answer's columns, at most 120 characters wide)",
    )
    p.add_argument(
        "--min-ratio",
        type=float,
        default=None,
        help="with quality_at_ratio: rank only entries compressing at least this much",
    )
    p.add_argument("--direction", default="total", choices=["forward", "backward", "dp", "total"])
    p.add_argument("--format", default="text", choices=["text", "markdown", "csv"])
    p.add_argument(
        "--claims",
        action="store_true",
        help="the seed papers' claims (leaderboard/claims.yaml) with their measured effects and verdicts",
    )
    p.add_argument(
        "--bandwidth",
        action="store_true",
        help="per compressor and task: the link bandwidth at which modeled compute utilization reaches 50/90/99%% "
        "(pipeline, tensor- and data-parallel traffic), next to quality, bytes per step and the code's time",
    )
    p.add_argument(
        "--score",
        action="store_true",
        help="one benchmark score per compressor: performance profiles of time-to-target over (task, network) pairs",
    )
    p.add_argument(
        "--hardware",
        default=None,
        metavar="NAME",
        help="project every time onto this accelerator (suite/results/hardware_profiles.json: h100-sxm, a100-80gb, "
        "rtx-4090): compute from counted FLOPs, codec from measured multiples of a copy; quality stays measured",
    )
    p.add_argument(
        "--model-size",
        default=None,
        metavar="NAME",
        help="with --hardware: project onto this model size (gpt2-124m, gpt2-350m, gpt-1.3b, gpt-7b, resnet18, ...)",
    )
    p.add_argument(
        "--mfu", type=float, default=None, help="with --hardware: model FLOPs utilization (default: the profile's)"
    )
    p.set_defaults(func=cmd_report)

    p = sub.add_parser(
        "compare",
        help="a results store's rows against the maintainers' rows of the same task, tier and setup (for CI)",
    )
    p.add_argument("store", help="the results store (.jsonl) to compare, e.g. records/<entry>/results.jsonl")
    p.add_argument(
        "--fail-above",
        type=float,
        default=None,
        metavar="DELTA",
        help="exit 1 when a row's quality is worse than the maintainers' by more than DELTA (the task's metric units)",
    )
    p.add_argument("--network", default=None, help="network of the modeled time-to-target (default 1Gbps)")
    p.add_argument(
        "--records", default=None, help="the records/ folder holding mpcbench-baselines/ (default: the checkout's)"
    )
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("validate", help="check results files, records/<entry>/ folders or a matrix YAML")
    p.add_argument("path", nargs="+")
    p.set_defaults(func=cmd_validate)

    from .verify import add_parser as add_verify  # stdlib-only at import: --help stays instant

    add_verify(sub)
    from .calibrate import add_parser as add_calibrate  # stdlib-only at import, like verify
    from .calibrate import add_retime_parser

    add_calibrate(sub)
    add_retime_parser(sub)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # before the imports: --help and typos stay instant
    if getattr(args, "results", "") is None:
        args.results = [DEFAULT_STORE]
        args.default_sources = True  # report adds the committed records/ when no source is named
    # nothing is imported before the command runs: `run` starts its fork server first thing, and
    # importing the error classes here (compressors.api imports torch) delayed that by 1.6 s
    try:
        return args.func(args)
    except KeyboardInterrupt:
        _err("interrupted; the store holds every cell finished so far (rerun to resume)")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK
    except Exception as e:
        if not isinstance(e, _input_errors()):
            raise
        _err(" ".join(str(e).split()))
        return EXIT_USAGE


# errors that mean bad input (exit 2, one line), by module: an exception can only be of a class
# whose module was imported, so only imported modules are looked at (the report never imports torch)
_INPUT_ERRORS = {
    "compressors.api": "CompressorError",
    "suite.pipeline.errors": "ConfigError",
    "suite.bench.store": "StoreError",
    "suite.bench.verify": "VerifyError",
}


def _input_errors() -> tuple[type[BaseException], ...]:
    found: list[type[BaseException]] = [UsageError]
    for module, name in _INPUT_ERRORS.items():
        if (m := sys.modules.get(module)) is not None:
            found.append(getattr(m, name))
    return tuple(found)


if __name__ == "__main__":
    sys.exit(main())
