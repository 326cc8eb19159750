"""``mpcbench links``: run cells over emulated links and print measured next to modeled times.

    mpcbench links --task shakespeare --tier quick --steps 12 --stages 4 \\
        --compressor none --compressor "quant(bits=4)" --compressor "topk(ratio=0.01)" \\
        --link 1Gbps --link 100Mbps --link 20mbit --reference records/mpcbench-baselines

Every selected cell runs once per ``--link`` (``mpcbench run --link L``: one network namespace
per node; cells already in the store are not run again), then one row per (cell, link) shows
the measured step time over the link, the network model's prediction for the same link as
emulated (its rate, no latency: the emulation adds none) and for the named profile (with its
latency), the measured and modeled communication time per step, and the largest deviation of
the kernel's byte counters from the wire bytes. ``time to target`` is the steps the cell needed
to reach its tier's target (from the record itself, else from the latest ``ok`` record of the
same task, tier, compressor and stages in ``--reference`` stores/folders, e.g. a full-length
single-process run) times the measured and the modeled step time.
These runs are the ground truth for the network model (``suite.results.network``).
"""

from __future__ import annotations

from typing import Any, Iterable

__all__ = ["link_rows", "format_rows", "steps_to_target"]


def _ref_key(r: dict[str, Any]) -> tuple:
    return (r.get("task"), r.get("tier"), r.get("compressor"), (r.get("run") or {}).get("n_stages"))


def steps_to_target(references: Iterable[dict[str, Any]]) -> dict[tuple, int | None]:
    """(task, tier, compressor, stages) -> steps to the target in the latest ok full-length record."""
    out: dict[tuple, int | None] = {}
    for r in sorted((r for r in references if r.get("status") == "ok"), key=lambda r: r.get("created", "")):
        if (r.get("config") or {}).get("steps") is None:  # a shortened run says nothing about the target
            out[_ref_key(r)] = r.get("reached_target_step")
    return out


def _get(d: dict[str, Any] | None, *path: str) -> Any:
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


def link_rows(records: Iterable[dict[str, Any]], references: Iterable[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """One row per ok record that ran over a link (``network.measured``), latest record per cell."""
    latest: dict[str, dict[str, Any]] = {}
    for r in records:
        if r.get("status") == "ok" and _get(r, "network", "measured"):
            latest[r["cell_key"]] = r  # the store is in append order: the last one wins
    ref = steps_to_target(references)
    rows = []
    for r in latest.values():
        net = r["network"]
        measured, modeled = net["measured"], net.get("modeled") or {}
        steps = r.get("reached_target_step")
        source = "own run" if steps is not None else None
        if steps is None and _ref_key(r) in ref:
            steps, source = ref[_ref_key(r)], "reference"
        m_step = measured.get("step_s")
        e_step = _get(modeled, "as_emulated", "step_s")
        kernel = [x for n in net.get("kernel_bytes") or [] for x in (n.get("tx_over_wire"), n.get("rx_over_wire")) if x]
        rows.append(
            {
                "task": r["task"],
                "tier": r["tier"],
                "compressor": r["compressor"],
                "link": net.get("link"),
                "hosts": net.get("hosts"),
                "steps": _get(r, "run", "steps"),
                "measured_step_s": m_step,
                "modeled_step_s": e_step,
                "modeled_error": (e_step / m_step - 1) if m_step and e_step else None,
                "modeled_profile_step_s": _get(modeled, "profile", "step_s"),
                "measured_comm_s": measured.get("comm_s"),
                "modeled_comm_s": _get(modeled, "as_emulated", "comm_s_per_step"),
                "kernel_over_wire_max": max(kernel) if kernel else None,
                "steps_to_target": steps,
                "steps_to_target_from": source,
                "measured_time_to_target_s": steps * m_step if steps and m_step else None,
                "modeled_time_to_target_s": steps * e_step if steps and e_step else None,
            }
        )
    rows.sort(key=lambda x: (x["task"], x["tier"], -(_rate(x["link"])), x["compressor"]))
    return rows


def _rate(link: str | None) -> float:
    from suite.pipeline.netns import parse_link

    try:
        return parse_link(str(link)).rate_bps
    except ValueError:
        return 0.0


def format_rows(rows: list[dict[str, Any]]) -> str:
    """A fixed-width text table of :func:`link_rows`."""

    def f(v: Any, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    head = (
        f"{'task/tier':<18} {'link':<9} {'compressor':<18} {'step meas.':>10} {'modeled':>9} {'err':>6} "
        f"{'w/ lat.':>8} {'comm meas.':>10} {'modeled':>8} {'kern/wire':>9} {'TTT meas.':>10} {'modeled':>9}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        ttt_note = "" if r["steps_to_target_from"] != "reference" else " (ref)"
        lines.append(
            f"{r['task'] + '/' + r['tier']:<18} {str(r['link']):<9} {r['compressor'][:18]:<18} {f(r['measured_step_s'], '.4f'):>10} "
            f"{f(r['modeled_step_s'], '.4f'):>9} {f(r['modeled_error'], '+.0%'):>6} {f(r['modeled_profile_step_s'], '.4f'):>8} "
            f"{f(r['measured_comm_s'], '.4f'):>10} {f(r['modeled_comm_s'], '.4f'):>8} {f(r['kernel_over_wire_max'], '.3f'):>9} "
            f"{f(r['measured_time_to_target_s'], '.1f'):>10} {f(r['modeled_time_to_target_s'], '.1f'):>9}{ttt_note}"
        )
    lines.append(
        "seconds per training step; 'modeled' = suite.results.network for the link as emulated (rate, no latency), "
        "'w/ lat.' = for the named profile with its latency; TTT = steps to target x step time"
    )
    return "\n".join(lines)
