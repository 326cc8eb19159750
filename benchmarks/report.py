"""Turn pytest-benchmark JSON from ``pytest benchmarks`` into the markdown tables of docs/performance.md.

Usage::

    pytest benchmarks --benchmark-json after.json
    python benchmarks/report.py after.json                      # tables of one run
    python benchmarks/report.py after.json --before before.json # + before/after columns
    python benchmarks/report.py a1.json a2.json --before b1.json b2.json  # several runs each

Times are the minimum over rounds (``extra_info["seconds"]``); "x floor" is the time divided
by the time to read the input once in the same run (``extra_info["floor_s"]``). Given
several runs of the same code (e.g. before and after runs interleaved on a shared machine),
each number is the minimum over the runs (a multiple of the floor is formed within its
run first).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

__all__ = ["load", "compressor_tables", "overhead_table", "machine_line", "main"]

PHASES = ("compress", "decompress", "roundtrip")


def load(path: str | Path) -> dict[str, Any]:
    with open(path) as f:
        return json.load(f)


def merge(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """One document whose benchmarks keep, per name, the minimum of each measured number."""
    if len(docs) == 1:
        return docs[0]
    out = dict(docs[0])
    best: dict[str, dict[str, Any]] = {}
    for d in docs:
        for b in d.get("benchmarks", []):
            e = dict(b.get("extra_info", {}))
            if "seconds" in e:
                e["floor_multiple"] = e["seconds"] / e["floor_s"]
            cur = best.setdefault(b["name"], {"name": b["name"], "extra_info": e})["extra_info"]
            for key in (
                "seconds",
                "floor_multiple",
                "floor_s",
                "step_s",
                "unsplit_step_s",
                "ratio",
                "overhead_per_step_s",
                "overhead_per_message_s",
            ):
                if key in e and key in cur:
                    cur[key] = min(cur[key], e[key])
            if "seconds" in cur:
                cur["gbps"] = cur["bytes_in"] / cur["seconds"] / 1e9
    out["benchmarks"] = list(best.values())
    out["merged_runs"] = [machine_line(d) for d in docs]
    return out


def _t(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def _x(v: float | None) -> str:
    return "-" if v is None else (f"{v:.2f}" if v < 10 else f"{v:.0f}")


def machine_line(doc: dict[str, Any]) -> str:
    m, c = doc.get("machine_info", {}), doc.get("commit_info", {})
    cpu = m.get("cpu", {}).get("brand_raw", m.get("processor", "?"))
    parts = [
        f"{cpu}, {m.get('cpu_count', '?')} cores, torch {m.get('torch', '?')} ({m.get('torch_threads', '?')} threads, "
        f"CPU clock: {m.get('cpu_clock', 'wall')})",
    ]
    if m.get("cuda_device"):
        parts.append(f"GPU {m['cuda_device']} (CUDA {m.get('cuda_version')})")
    la0, la1 = m.get("loadavg_at_start"), m.get("loadavg_at_end")
    if la0:
        parts.append(f"1-min load average {la0[0]:.1f} at start, {la1[0]:.1f} at end" if la1 else f"load {la0[0]:.1f}")
    cid = str(c.get("id", "?"))
    cid = cid[:8] if all(ch in "0123456789abcdef" for ch in cid) else cid  # e.g. "unversioned" outside a repo
    parts.append(f"{doc.get('datetime', '?')[:16]}, repository commit {cid}{' (dirty)' if c.get('dirty') else ''}")
    if m.get("compressors_source"):
        parts.append(f"compressors {m['compressors_source'].split()[-1]}")
    return "; ".join(parts)


def _compressor_rows(doc: dict[str, Any]) -> dict[str, dict[str, dict[str, dict]]]:
    """case label -> compressor -> phase -> extra_info."""
    out: dict[str, dict[str, dict[str, dict]]] = defaultdict(lambda: defaultdict(dict))
    for b in doc.get("benchmarks", []):
        e = b.get("extra_info", {})
        if "phase" not in e or "seconds" not in e:
            continue
        label = f"{e['device']} {e['dtype']} {e['shape']}"
        out[label][e["compressor"]][e["phase"]] = e
    return out


def compressor_tables(doc: dict[str, Any], before: dict[str, Any] | None = None) -> str:
    rows = _compressor_rows(doc)
    old = _compressor_rows(before) if before else {}
    lines = []
    for label, by_name in rows.items():
        floor = next(iter(by_name.get("(read floor: x.sum())", {}).values()), None)
        any_e = next(iter(next(iter(by_name.values())).values()))
        mb = any_e["bytes_in"] / 2**20
        fl = any_e["floor_s"]
        lines.append(
            f"\n**{label}** ({mb:.0f} MiB in; read floor {_t(fl)} = {any_e['bytes_in'] / fl / 1e9:.1f} GB/s"
            + (f", benchmarked x.sum() {_t(floor['seconds'])}" if floor else "")
            + ")\n"
        )
        head = "| compressor | spec | ratio | compress | decompress | round trip | GB/s | x floor |"
        sep = "|---|---|---:|---:|---:|---:|---:|---:|"
        if before:
            head += " x floor before | speed-up |"
            sep += "---:|---:|"
        lines += [head, sep]
        for name in sorted(n for n in by_name if not n.startswith("(")):
            ph = by_name[name]
            rt = ph.get("roundtrip")
            any_p = next(iter(ph.values()))
            ratio = any_p["bytes_in"] / any_p["payload_bytes"] if any_p.get("payload_bytes") else None
            cells = [
                name,
                f"`{any_p['spec']}`",
                _x(ratio),
                *(_t(ph[p]["seconds"]) if p in ph else "-" for p in PHASES),
                f"{rt['gbps']:.2f}" if rt else "-",
                _x(rt["floor_multiple"]) if rt else "-",
            ]
            if before:
                ort = old.get(label, {}).get(name, {}).get("roundtrip")
                cells.append(_x(ort["floor_multiple"]) if ort else "-")
                cells.append(f"{ort['seconds'] / rt['seconds']:.1f}x" if ort and rt else "-")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def overhead_table(doc: dict[str, Any]) -> str:
    rows = [
        b["extra_info"] for b in doc.get("benchmarks", []) if b.get("extra_info", {}).get("variant") == "pipeline_none"
    ]
    if not rows:
        return ""
    lines = [
        "| case | device | stages x micro-batches | unsplit step | `none` pipeline step | ratio | overhead / message |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for e in rows:
        lines.append(
            f"| {e['case']} | {e['device']} | {e['stages']} x {e['microbatches']} | {_t(e['unsplit_step_s'])} | "
            f"{_t(e['step_s'])} | {e['ratio']:.3f} | {_t(e['overhead_per_message_s'])} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", nargs="+", help="pytest-benchmark JSON (--benchmark-json) of the run(s) to report")
    ap.add_argument("--before", nargs="+", help="JSON of earlier run(s): adds their x floor and the speed-up")
    args = ap.parse_args(argv)
    doc = merge([load(p) for p in args.json])
    before = merge([load(p) for p in args.before]) if args.before else None
    for label, d in (("Measured", doc), ("Before", before)):
        if d is not None:
            runs = d.get("merged_runs") or [machine_line(d)]
            print(
                f"{label}: "
                + (runs[0] if len(runs) == 1 else "minimum over runs:\n" + "\n".join(f"- {r}" for r in runs))
            )
            print()
    tables = compressor_tables(doc, before)
    if tables:
        print(tables.lstrip("\n"))
    ov = overhead_table(doc)
    if ov:
        print(ov)
    return 0


if __name__ == "__main__":
    sys.exit(main())
