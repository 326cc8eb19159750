"""Property (issue 12): whatever hostile entries sit next to them, every good entry loads and renders.

Hypothesis generates hostile submissions: entry.yaml texts (impossible dates, huge integers, anchors and
merge keys, tags, binary, wrong types) and results files whose records have one field replaced by a
hostile value (out-of-range numbers, NaN, huge integers, control characters and markup, nested
structures, wrong types) or are junk lines. The good entries' records must all load, every problem must
be one line, and the ranking, the text and markdown reports and the Streamlit app must render every
good entry.
"""

from __future__ import annotations

import copy
import json
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leaderboard.ranking import aggregate, to_frame
from leaderboard.submissions import load_entries

TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
HOSTILE_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    TEXT,
    st.just("\x1b[2J# heading\n<script>x</script>"),
    st.just("9999-99-99"),
)
HOSTILE_VALUES = st.recursive(
    HOSTILE_SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3), max_leaves=6
)
FIELDS = [
    "final_metric",
    "seed",
    "created",
    "task",
    "compressor",
    "metric_name",
    "higher_is_better",
    "bytes",
    "bytes_per_step",
    "curve",
    "run",
    "time",
    "modeled",
    "provenance",
    "config",
    "status",
    "error",
    "record_id",
    "cell_key",
    "entry",
    "is_maintainer",
    "specs",
    "schema",
]
YAML_TEXTS = st.one_of(
    TEXT,
    st.sampled_from(
        [
            "name: x\nsubmitter: y\ndate: 2026-13-45\n",
            "name: x\nsubmitter: y\ndate: 2026-02-30\n",
            "name: x\nsubmitter: y\ndate: 9999-12-31\n",
            f"name: {'9' * 5000}\nsubmitter: y\ndate: 2026-01-01\n",
            "a: &a [1, 2]\nb: {<<: *a}\nname: x\nsubmitter: y\ndate: 2026-01-01\n",
            "name: !!python/object/apply:os.system [true]\nsubmitter: y\ndate: 2026-01-01\n",
            "name: !!int '12'\nsubmitter: y\ndate: 2026-01-01\n",
            "[1, 2, 3]",
            "{{{{",
            "\x00\xff",
            "name: x\nsubmitter: y\ndate: 2026-01-01\nplugin: p.py\nplugin_hash: 0000000000000000\n",
        ]
    ),
)


@st.composite
def hostile_entry(draw, good_record):
    """(entry.yaml text or None for a valid one, results lines as bytes)."""
    yaml_text = draw(st.one_of(st.none(), YAML_TEXTS))
    lines = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["field", "junk", "copy", "bigint"]))
        if kind == "junk":
            lines.append(draw(st.binary(max_size=30)).replace(b"\n", b" "))
            continue
        if kind == "bigint":  # an integer JSON cannot turn into a Python int (over 4300 digits)
            lines.append(json.dumps(good_record).replace('"seed": 0', '"seed": ' + "9" * 5000).encode())
            continue
        rec = copy.deepcopy(good_record)
        if kind == "field":
            rec[draw(st.sampled_from(FIELDS))] = draw(HOSTILE_VALUES)
        try:
            lines.append(json.dumps(rec, allow_nan=True).encode())
        except (ValueError, TypeError):
            lines.append(b'{"unserializable": true}')
    return yaml_text, lines


def _render_everything(records, tmp: Path) -> None:
    from suite.bench.cli import main

    frame = to_frame(records)
    agg = aggregate(frame)
    assert {"good-a", "good-b"} <= set(agg["entry"])
    store = tmp / "all.jsonl"
    store.write_text(
        "".join(json.dumps({k: v for k, v in r.items() if k not in ("entry_info",)}) + "\n" for r in records)
    )
    for fmt in ("text", "markdown"):
        assert main(["report", "--records", str(tmp / "records"), "--format", fmt]) == 0


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(data=st.data())
def test_hostile_entries_never_hide_or_break_good_ones(lb, capsys, data):
    tmp = Path(tempfile.mkdtemp(prefix="mpcbench-hyp-"))
    try:
        root = tmp / "records"
        good_a = lb.make_records(tasks=("cifar10",), compressors=("none", "fp16"), seeds=(0, 1))
        good_b = [lb.make_record("shakespeare", "quant(bits=4)", s) for s in (0, 1)]
        lb.write_entry(root, "good-a", good_a)
        lb.write_entry(root, "good-b", good_b)
        n_hostile = data.draw(st.integers(1, 3))
        for i in range(n_hostile):
            yaml_text, lines = data.draw(hostile_entry(lb.make_record("cifar10", "topk(ratio=0.1)", 0)))
            name = data.draw(st.sampled_from(["0-attacker", "zz-attacker", "mid-attacker"])) + f"-{i}"
            d = lb.write_entry(root, name, [])
            (d / "results.jsonl").write_bytes(b"\n".join(lines) + b"\n")
            if yaml_text is not None:
                (d / "entry.yaml").write_text(yaml_text, errors="surrogateescape")
        records, problems = load_entries(root)
        for p in problems:
            assert p.reason and "\n" not in p.reason and "\n" not in p.path
        loaded = {(r["entry"], r["record_id"]) for r in records}
        assert {("good-a", r["record_id"]) for r in good_a} <= loaded
        assert {("good-b", r["record_id"]) for r in good_b} <= loaded
        for r in records:  # nothing impossible got through
            if r["status"] == "ok" and r["metric_name"] == "accuracy":
                assert 0 <= r["final_metric"] <= 1
            assert 0 <= r["seed"] <= 2**31 - 1
        _render_everything(records, tmp)
        capsys.readouterr()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_the_app_renders_every_good_entry_next_to_hostile_ones(monkeypatch, tmp_path, lb):
    """One fixed draw of the property through the Streamlit app (an AppTest run costs seconds)."""
    from streamlit.testing.v1 import AppTest

    root = tmp_path / "records"
    lb.write_entry(root, "good-a", lb.make_records(tasks=("cifar10",), compressors=("none", "fp16"), seeds=(0, 1)))
    bad = lb.write_entry(root, "0-attacker", [])
    (bad / "entry.yaml").write_text("name: x\nsubmitter: y\ndate: 2026-13-45\n")
    junk = lb.write_entry(root, "junk", [])
    (junk / "results.jsonl").write_bytes(b"1\n" * 100_000)
    liar = lb.write_entry(root, "liar", [{**lb.make_record("cifar10", "topk(ratio=0.1)", 0), "final_metric": 7.5}])
    assert liar.exists()
    monkeypatch.setenv("MPCBENCH_RECORDS", str(root))
    monkeypatch.setenv("MPCBENCH_RESULTS", "")
    app = Path(__file__).resolve().parents[2] / "leaderboard" / "app.py"
    at = AppTest.from_file(str(app), default_timeout=120).run()
    assert not at.exception, [e.value for e in at.exception]
    table = at.main.dataframe[0].value
    # one entry on the page: it is named once above the table, not in a column
    assert "entry" not in table and sorted(table["compressor"]) == ["fp16", "none"]
    assert any("entry: good-a" in t.value for t in at.text)
