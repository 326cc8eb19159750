"""``mpcbench verify records/<entry>``: re-run the board's rows and say, per row, what was established.

What "verified" means (docs/reliability.md, "What verified guarantees"): the base branch's own
code re-ran at least one cell of the row in a sandbox, every latest record of the row agreed with
that re-run within references the submitter cannot touch, and the row shows and ranks by the
re-run's times. The jobs, one module each:

- :mod:`.sampling`: which rows and cells (the board's row, :mod:`suite.results.entries`; a seed from ``secrets``);
- :mod:`.code`: which code re-runs a cell (landed on the base branch, not reverted since);
- :mod:`.identity`: who may change an entry (commits signed by the key the base branch's entry.yaml names);
- :mod:`.sandbox` (+ :mod:`.stage_jail`): where it runs; :mod:`.rerun`: one contained re-run;
- :mod:`.tolerances`: trusted spreads (:mod:`.row_reference`: one row's, seeds of its own run once); :mod:`.compare`: a record against a re-run;
- :mod:`.report`: the report and the re-runs' times; :mod:`.trusted`: the base branch judges.
"""

from __future__ import annotations

import argparse
import sys

from .errors import VerifyError

__all__ = ["VerifyError", "add_parser", "cmd_verify", "main"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    from .sampling import FRACTION

    p = sub.add_parser("verify", help="re-run the rows of a records/<entry> folder and compare every record of them")
    p.add_argument("entry", nargs="+", help="entry folder(s), e.g. records/mpcbench-baselines")
    p.add_argument(
        "--seed", type=int, default=None, help="the sample's seed (default: a fresh random one, stored in the output)"
    )
    p.add_argument(
        "--fraction", type=float, default=FRACTION,
        help=f"share of the cells beyond one per row that is re-run too (default {FRACTION})",
    )  # fmt: skip
    p.add_argument(
        "--rows",
        type=int,
        default=None,
        help="re-run at most this many rows (drawn with the seed); the rest stay not verified",
    )
    p.add_argument(
        "--base", default="main", help="base branch: its code judges, and record commits must have landed on it"
    )
    p.add_argument(
        "--here", action="store_true", help="judge with this checkout's code instead of the base branch's (development)"
    )
    p.add_argument("--jobs", type=int, default=1, help="re-runs at a time (default 1)")
    p.add_argument(
        "--cell-timeout", type=float, default=3600.0, help="time limit of one re-run in seconds (default 3600)"
    )
    p.add_argument(
        "--threads", type=int, default=1, help="torch threads per re-run (default 1, as the baselines were run)"
    )
    p.add_argument(
        "--attempts", type=int, default=2,
        help="runs of a cell at most while the machine is contended (the least loaded one counts; default 2)",
    )  # fmt: skip
    p.add_argument("--no-write", action="store_true", help="do not write <entry>/verification.json")
    p.add_argument(
        "--signatures-only", action="store_true",
        help="only check that the entry's folder, if it changed since --base, carries a manifest signed by the "
        "key the base branch names for it with a version above the base's (no re-runs; the folder may be gone)",
    )  # fmt: skip
    p.add_argument(
        "--sign", metavar="KEY", default=None,
        help="write the entry's next manifest (its files' digest, a version above --base's) and sign it with "
        "this ssh-ed25519 private key file; nothing else runs",
    )  # fmt: skip
    p.add_argument(
        "--resume", metavar="DIR", default=None,
        help="keep each finished re-run in DIR (a private folder); run again with the same --seed to re-run only the "
        "cells not yet run; with --check, the committed verification is checked against the re-runs kept there",
    )  # fmt: skip
    p.add_argument(
        "--check", action="store_true",
        help="re-run the committed verification.json with its seed; fail if the result differs (the CI check)",
    )  # fmt: skip
    p.set_defaults(func=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> int:
    from leaderboard.safe_text import plain

    from ..options import check_cell_timeout
    from .report import check_verification, verify_entry
    from .trusted import judged, run_judged

    if not 0.0 <= args.fraction <= 1.0:
        raise VerifyError(f"--fraction must be in [0, 1], got {args.fraction}")
    if not 1 <= args.threads <= 256:
        raise VerifyError(f"--threads must be in [1, 256], got {args.threads}")
    if not 1 <= args.jobs <= 64:
        raise VerifyError(f"--jobs must be in [1, 64], got {args.jobs}")
    if not 1 <= args.attempts <= 5:
        raise VerifyError(f"--attempts must be in [1, 5], got {args.attempts}")
    if args.rows is not None and args.rows < 1:
        raise VerifyError(f"--rows must be at least 1, got {args.rows}")
    check_cell_timeout(args.cell_timeout, "--cell-timeout")
    if args.sign:  # the owner's own act, in their checkout: no judge needed
        from pathlib import Path

        from .identity import sign

        for entry in args.entry:
            print(plain(sign(Path(entry), Path(args.sign), args.base)))
        return 0
    if not args.here and not judged():
        return run_judged(_argv_of(args), list(args.entry), args.base)
    if args.signatures_only:
        from pathlib import Path

        from .identity import check_identity

        for entry in args.entry:
            print(plain(check_identity(Path(entry), args.base)))
        return 0
    kw = dict(
        base=args.base, time_limit_s=args.cell_timeout, threads=args.threads, jobs=args.jobs, attempts=args.attempts
    )
    say = lambda m: print(plain(m), file=sys.stderr, flush=True)  # noqa: E731
    worst = 0
    for entry in args.entry:
        if args.check:
            # --resume: compare the re-runs a verification kept there (same seed and records) instead of
            # running them again; the cells not kept are re-run (and kept)
            diffs = check_verification(entry, progress=say, resume=args.resume, **kw)
            for d in diffs:
                print(plain(d))
            print(plain(f"{entry}: verification.json {'differs from' if diffs else 'equals'} a re-run of the check"))
            worst = max(worst, 1 if diffs else 0)
            continue
        report = verify_entry(
            entry, seed=args.seed, fraction=args.fraction, write=not args.no_write, progress=say,
            resume=args.resume, rows=args.rows, **kw,
        )  # fmt: skip
        rows = report["rows"]
        n_ok = sum(1 for r in rows if r["status"] == "verified")
        s = report["sampling"]
        print(
            plain(
                f"{entry}: {report['status']} ({n_ok} of {s['rows_total']} rows verified, {len(rows)} re-run; "
                f"{sum(len(r['reruns']) for r in rows)} re-run cells; every latest record of a re-run row compared; "
                f"seed {report['seed']}; judged by {report['judged_by']} {str(report['verifier_commit'])[:12]})"
            )
        )
        if report["containment"]["missing"]:
            print(plain(f"{entry}: containment missing: " + "; ".join(report["containment"]["missing"])))
        worst = max(worst, 0 if report["status"] in ("verified", "partly verified") else 1)
    return worst


def _argv_of(args: argparse.Namespace) -> list[str]:
    """The command line of ``args`` again, for the base branch's verifier."""
    out = list(args.entry)
    for flag, value in (
        ("--seed", args.seed), ("--fraction", args.fraction), ("--rows", args.rows), ("--base", args.base),
        ("--jobs", args.jobs), ("--cell-timeout", args.cell_timeout), ("--threads", args.threads),
        ("--resume", args.resume), ("--attempts", args.attempts),
    ):  # fmt: skip
        if value is not None:
            out += [flag, str(value)]
    out += [
        f
        for f, on in (
            ("--no-write", args.no_write),
            ("--check", args.check),
            ("--signatures-only", args.signatures_only),
        )
        if on
    ]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="mpcbench")
    add_parser(ap.add_subparsers(dest="command", required=True))
    args = ap.parse_args(argv)
    try:
        return args.func(args)
    except VerifyError as e:
        print(f"mpcbench: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
