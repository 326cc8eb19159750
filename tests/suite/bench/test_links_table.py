"""``mpcbench links`` / report: the measured-vs-modeled rows built from records (no runs)."""

from __future__ import annotations

from suite.bench.links import format_rows, link_rows


def _record(key: str, compressor: str, link: str, measured: float, modeled: float, reached=None, **extra):
    return {
        "status": "ok",
        "cell_key": key,
        "task": "shakespeare",
        "tier": "quick",
        "compressor": compressor,
        "created": "2026-11-24T00:00:00",
        "reached_target_step": reached,
        "run": {"n_stages": 4, "steps": 12},
        "config": {"steps": 12},
        "network": {
            "link": link,
            "hosts": 4,
            "measured": {"step_s": measured, "comm_s": measured / 2},
            "modeled": {"as_emulated": {"step_s": modeled, "comm_s_per_step": modeled / 3}},
            "kernel_bytes": [{"tx_over_wire": 1.01, "rx_over_wire": 1.02}],
        },
        **extra,
    }


def test_rows_put_measured_next_to_modeled_and_use_reference_steps_to_target():
    records = [
        _record("a", "none", "100Mbps", 2.0, 1.5),
        _record("b", "none", "1Gbps", 1.0, 0.9),
        {"status": "ok", "cell_key": "c", "task": "shakespeare", "tier": "quick", "compressor": "none"},  # no link
    ]
    reference = [
        {
            "status": "ok",
            "task": "shakespeare",
            "tier": "quick",
            "compressor": "none",
            "created": "x",
            "reached_target_step": 90,
            "run": {"n_stages": 4},
            "config": {"steps": None},
        }
    ]
    rows = link_rows(records, reference)
    assert [r["link"] for r in rows] == ["1Gbps", "100Mbps"]  # fastest link first
    r = rows[1]
    assert r["modeled_error"] == 1.5 / 2.0 - 1 and r["kernel_over_wire_max"] == 1.02
    assert r["steps_to_target"] == 90 and r["steps_to_target_from"] == "reference"
    assert r["measured_time_to_target_s"] == 180.0 and r["modeled_time_to_target_s"] == 135.0
    text = format_rows(rows)
    assert "100Mbps" in text and "-25%" in text and "(ref)" in text


def test_a_later_record_of_the_same_cell_wins():
    rows = link_rows([_record("a", "none", "20mbit", 3.0, 2.0), _record("a", "none", "20mbit", 4.0, 2.0)])
    assert len(rows) == 1 and rows[0]["measured_step_s"] == 4.0
