"""The Streamlit app driven by streamlit.testing's AppTest on fixture records (no browser)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from streamlit.testing.v1 import AppTest

APP = Path(__file__).resolve().parents[2] / "leaderboard" / "app.py"


def _app(monkeypatch, records: Path | None = None, results: Path | None = None) -> AppTest:
    monkeypatch.setenv("MPCBENCH_RECORDS", str(records) if records else "")
    monkeypatch.setenv("MPCBENCH_RESULTS", str(results) if results else "")
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _ranking(at: AppTest):
    """The ranking table: the first dataframe of the main area."""
    return at.main.dataframe[0].value


@pytest.fixture
def app(monkeypatch, records_dir) -> AppTest:
    return _app(monkeypatch, records_dir)


def test_ranking_table_and_sections_render(app):
    table = _ranking(app)
    # the answer first (at 1400 px nothing of it is scrolled away): name, quality, its delta, time-to-target
    assert list(table.columns[:6]) == [
        "rank",
        "compressor",
        "accuracy",
        "Δ vs none",
        "time-to-target @ 1Gbps",
        "Δ time vs none",
    ]
    assert "entry" in table.columns  # several entries here (one entry: no column, test_one_entry_...)
    assert {"none", "fp16", "quant(bits=4)", "topk(ratio=0.1)"} <= set(table.compressor)
    assert table.columns[-1] == "spec"  # every parameter, last
    subheaders = [s.value for s in app.subheader]
    assert subheaders == [
        "Ranking",
        "Overview across tasks",
        "Time to target against bandwidth",
        "Quality versus bytes",
        "Time to quality",
        "Training curves",
        "Entry details",
        "What link do I need",
        "On other hardware (projected)",
        "Benchmark score",
        "Reproductions",
    ]
    links = [d.value for d in app.dataframe if "link 50%" in d.value.columns]
    assert links and {"link 90%", "link 99%", "code ms/step"} <= set(links[0].columns)
    charts = [e for e in app.main if getattr(e, "type", None) == "vega_lite_chart"]
    assert len(charts) == 5  # time to target vs bandwidth, Pareto plot, time to quality, curves, performance profiles
    detail = app.json[0].value
    assert '"plugin_hash"' in detail and '"provenance"' in detail and '"submitter"' in detail
    explanation = [m.value for m in app.markdown if "Fastest time-to-target" in m.value]  # the report's rule
    assert explanation and "Welch" in explanation[0]


def test_the_overview_lists_every_compressor_across_tasks_with_its_score_and_a_search(app):
    overview = next(d.value for d in app.main.dataframe if "score" in d.value.columns and "entry" in d.value.columns)
    assert list(overview.columns) == ["compressor", "entry", "cifar10 Δ accuracy", "shakespeare Δ val_loss", "score"]
    quant = overview[overview.compressor == "quant(bits=4)"].iloc[0]
    assert quant["cifar10 Δ accuracy"].startswith("-0.01") and "(n=3)" in quant["cifar10 Δ accuracy"]
    assert quant["score"] != "-" and overview.iloc[0]["score"] >= overview.iloc[1]["score"]  # best score first
    app.text_input(key="overview_search").input("TOPK").run()
    found = next(d.value for d in app.main.dataframe if "score" in d.value.columns and "entry" in d.value.columns)
    assert list(found.compressor) == ["topk(ratio=0.1)"]


def test_filters_change_the_ranking(app):
    before = _ranking(app)
    app.selectbox(key="rule").select("time_to_target").run()
    app.selectbox(key="network").select("100Gbps").run()
    fast = _ranking(app)
    assert fast.compressor.iloc[0] == "none" and "time-to-target @ 100Gbps" in fast.columns
    app.selectbox(key="network").select("80Mbps").run()
    slow = _ranking(app)
    assert slow.compressor.iloc[0] == "quant(bits=4)"
    assert list(slow.compressor) != list(fast.compressor)
    assert any("Fastest time-to-target" in m.value for m in app.markdown)

    app.selectbox(key="rule").select("quality_at_ratio").run()
    app.number_input(key="min_ratio").set_value(3.0).run()
    eligible = _ranking(app)
    assert list(eligible[eligible["rank"] != "-"].compressor) == ["quant(bits=4)", "topk(ratio=0.1)"]
    assert not eligible.equals(before)

    app.selectbox(key="direction").select("forward").run()
    fwd = _ranking(app)
    assert "ratio forward" in fwd.columns and "ratio fwd / bwd / dp" not in fwd.columns

    app.selectbox(key="task").select("shakespeare").run()
    shake = _ranking(app)
    assert "val_loss" in shake.columns and "hostile-entry" not in set(shake.get("entry", ()))


def test_hostile_text_only_appears_as_text(app, lb, records_dir):
    hostile = lb.HOSTILE_NAME
    table = _ranking(app)
    assert hostile in set(table.compressor)  # shown, verbatim, in a dataframe cell
    # never through markdown-rendering elements
    for kind in ("markdown", "caption", "title", "subheader", "header", "warning", "info", "error"):
        for el in getattr(app, kind):
            assert "<img" not in str(el.value) and "<script" not in str(el.value), (kind, el.value)
    app.selectbox(key="detail").select(f"hostile-entry / {hostile}").run()
    detail = json.loads(app.json[0].value)  # the JSON viewer shows strings as text
    assert detail["compressor"] == hostile and detail["entry_info"]["name"] == hostile
    assert not (records_dir / "PWNED").exists()


def test_app_source_never_renders_html():
    src = APP.read_text()
    for forbidden in ("unsafe_allow_html", "st.html", "components.html", "st.table("):
        assert forbidden not in src
    # markdown only ever gets the app's own text: no record fields interpolated into it
    for call in re.findall(r"st\.(?:markdown|caption|title|header|subheader|write)\((.*)", src):
        assert "explanation" in call or not re.search(r"\{(?!explanation)", call), call


def test_skipped_files_are_listed(app):
    assert any("2 file(s) or record(s) were skipped" in w.value for w in app.warning)
    problems = app.main.dataframe[-1].value
    assert list(problems.columns) == ["path", "reason"]
    assert any("could not determine a constructor" in r for r in problems.reason)
    assert any(p.endswith("results.jsonl:1") and "invalid JSON" in r for p, r in zip(problems.path, problems.reason))


def test_empty_records_folder_is_friendly(monkeypatch, tmp_path):
    (tmp_path / "records").mkdir()
    at = _app(monkeypatch, tmp_path / "records")
    assert any("No results to show yet" in i.value for i in at.info)
    assert not at.main.dataframe


def test_results_store_source(monkeypatch, tmp_path, lb):
    store = lb.write_jsonl(tmp_path / "store.jsonl", lb.make_records(tasks=("shakespeare",)))
    at = _app(monkeypatch, results=store)
    table = _ranking(at)
    assert "entry" not in table and "val_loss" in table.columns  # one entry: named once above the table
    assert any("entry: local" in t.value for t in at.text)


def test_record_warnings_are_flagged_in_the_table_and_listed_in_the_detail(monkeypatch, tmp_path, lb):
    """A record's ``warnings`` (here: payloads larger than the raw tensors, and hostile text)
    show up as a per-entry count in the ranking and as plain text rows in the entry's detail."""
    warn = "forward: compressed payloads are larger than the raw tensors (wire 800 B > raw 200 B, ratio 0.25x)"
    recs = lb.make_records(tasks=("cifar10",), compressors=("none", "fp16"))
    for r in recs:
        if r["compressor"] == "fp16" and r["seed"] < 2:
            r["warnings"] = [warn, "backward: " + lb.HOSTILE_NAME]
    at = _app(monkeypatch, results=lb.write_jsonl(tmp_path / "store.jsonl", recs))
    table = _ranking(at)
    assert dict(zip(table.compressor, table.warnings)) == {"none": "", "fp16": "⚠ 4"}
    assert any("1 entry has warnings in their records" in w.value for w in at.warning)

    def detail_warnings():
        return [d.value for d in at.main.dataframe if list(d.value.columns) == ["seed", "warning"]]

    at.selectbox(key="detail").select("fp16").run()  # one entry: the compressor names the row
    (shown,) = detail_warnings()
    assert list(shown.seed) == [0, 0, 1, 1]
    assert list(shown.warning) == [warn, "backward: " + lb.HOSTILE_NAME] * 2  # verbatim, as data
    assert any(t.value == "Warnings in this entry's records (4):" for t in at.text)
    for kind in ("markdown", "caption", "warning", "info", "error"):
        for el in getattr(at, kind):
            assert "<img" not in str(el.value) and "compressed payloads" not in str(el.value), (kind, el.value)
    at.selectbox(key="detail").select("none").run()
    assert detail_warnings() == [] and any(t.value == "No warnings in this entry's records." for t in at.text)


def test_no_warning_column_or_banner_without_warnings(app):
    assert "warnings" not in _ranking(app).columns
    assert not any("warnings in their records" in w.value for w in app.warning)


def test_setups_are_a_selector_each_ranked_against_its_own_none(monkeypatch, tmp_path, lb):
    """The same compressors run under two settings (1F1B and GPipe schedules): a Setup selector shows one
    layout at a time with its own none row, never the two interleaved; the detail and the plots follow it."""
    recs = lb.make_records(tasks=("cifar10",), compressors=("none", "fp16"))
    for r in lb.make_records(tasks=("cifar10",), compressors=("none", "fp16")):
        r = dict(r, run={**r["run"], "schedule": "gpipe"}, config={**r["config"], "schedule": "gpipe"})
        recs.append(dict(r, cell_key=r["cell_key"] + "-tr", record_id=r["record_id"] + "-tr"))
    at = _app(monkeypatch, results=lb.write_jsonl(tmp_path / "store.jsonl", recs))
    torchrun = "3 stages, gpipe, M=4, cpu"
    assert at.selectbox(key="setup").options == [  # what each is, then its details; as many compressors: by name
        "pipeline, 3 stages (1f1b, M=4, cpu)",
        "pipeline, 3 stages (gpipe, M=4, cpu)",
    ]
    table = _ranking(at)
    assert list(table.columns[:3]) == ["rank", "compressor", "accuracy"] and "setup" not in table
    assert sorted(table.compressor) == ["fp16", "none"] and "entry" not in table  # one entry: said once, above
    assert all(q.endswith("(n=3)") for q in table.accuracy)  # not 6 pooled "seeds"
    assert "baseline" in set(table["Δ vs none"])
    at.selectbox(key="setup").select(torchrun).run()
    assert sorted(_ranking(at).compressor) == ["fp16", "none"]
    assert at.selectbox(key="detail").options == ["none", "fp16"] or sorted(at.selectbox(key="detail").options) == [
        "fp16",
        "none",
    ]
    at.selectbox(key="detail").select("fp16").run()
    detail = json.loads(at.json[0].value)
    assert detail["setup"] == torchrun and len(detail["seeds"]) == 3
    pareto = next(e for e in at.main if "wire bytes per step" in getattr(getattr(e, "proto", None), "spec", ""))
    layer = next(x for x in json.loads(pareto.proto.spec)["layer"] if x["mark"]["type"] == "point")
    data = next(d.data.data for d in pareto.proto.datasets if d.name == layer["data"]["name"])
    points = pa.ipc.open_stream(data).read_all().to_pandas()
    assert set(points.setup) == {torchrun} and len(points) == 2


def test_one_setup_shows_no_setup_column(app):
    assert "setup" not in _ranking(app).columns
    assert "fixture-baselines / fp16" in app.selectbox(key="detail").options
    pareto = next(e for e in app.main if "wire bytes per step" in getattr(getattr(e, "proto", None), "spec", ""))
    layer = next(x for x in json.loads(pareto.proto.spec)["layer"] if x["mark"]["type"] == "point")
    assert "shape" not in layer["encoding"]


def _chart_data(at: AppTest, title_part: str) -> pd.DataFrame:
    """The data of the chart whose x axis title contains ``title_part``."""
    for e in at.main:
        if getattr(e, "type", None) != "vega_lite_chart":
            continue
        spec = json.loads(e.proto.spec)
        layers = spec.get("layer", [spec])
        for layer in layers:
            x = layer.get("encoding", {}).get("x", {})
            if title_part in str(x.get("title", "")):
                name = layer["data"]["name"]
                data = next(d.data.data for d in e.proto.datasets if d.name == name)
                return pa.ipc.open_stream(data).read_all().to_pandas()
    raise AssertionError(f"no chart with {title_part!r} on its x axis")


def test_time_to_quality_plot_follows_the_network_slider(app):
    """One line per compressor: quality against modeled seconds; a slower link stretches the
    lines of compressors that send more bytes, and the ranking follows the slider."""
    fast = _chart_data(app, "modeled wall-clock seconds")
    assert {"none", "fp16", "quant(bits=4)", "topk(ratio=0.1)"} <= {lbl.split(" / ")[1] for lbl in fast.label}
    assert (fast.groupby("label").time_s.apply(lambda s: s.is_monotonic_increasing)).all()
    app.selectbox(key="rule").select("time_to_target").run()
    app.selectbox(key="network").select("custom (sliders)").run()
    app.select_slider(key="bw").set_value(1e6).run()
    app.select_slider(key="lat").set_value(0.01).run()
    slow = _chart_data(app, "modeled wall-clock seconds")
    assert "1Mbps" in " ".join(str(t.value) for t in app.text)  # the page says which link is shown
    end = lambda df, c: df[df.label.str.endswith(c)].time_s.max()  # noqa: E731
    # at 1 Mbps the uncompressed run takes far longer than topk, at 1 Gbps it did not
    assert end(slow, "/ none") / end(slow, "/ topk(ratio=0.1)") > 3 * end(fast, "/ none") / end(
        fast, "/ topk(ratio=0.1)"
    )
    table = _ranking(app)
    table = table[table.entry == "fixture-baselines"]
    column = next(c for c in table.columns if c.startswith("time-to-target @ 1Mbps"))
    assert table.compressor.iloc[0] == "quant(bits=4)" and table.compressor.iloc[-1] == "none"
    assert all(v.removesuffix(" †").endswith("(3/3)") for v in table[column]), list(table[column])
    app.select_slider(key="bw").set_value(1e12).run()
    app.select_slider(key="lat").set_value(0.0).run()
    fastest = _ranking(app)
    assert fastest[fastest.entry == "fixture-baselines"].compressor.iloc[0] in ("none", "fp16")


def test_filters_live_in_the_url(monkeypatch, records_dir):
    monkeypatch.setenv("MPCBENCH_RECORDS", str(records_dir))
    monkeypatch.setenv("MPCBENCH_RESULTS", "")
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params.update(task="shakespeare", rule="pareto", network="80Mbps", quality="uncompressed")
    at.run()
    assert not at.exception
    assert at.selectbox(key="task").value == "shakespeare" and at.selectbox(key="rule").value == "pareto"
    assert at.selectbox(key="network").value == "80Mbps"
    assert "val_loss (no compression at eval)" in _ranking(at).columns
    at.selectbox(key="direction").select("forward").run()
    assert at.query_params["direction"] == ["forward"] or at.query_params["direction"] == "forward"


@pytest.mark.parametrize("first_spelling", ["same", "relative"])
def test_local_results_are_shown_unless_unticked(monkeypatch, tmp_path, records_dir, lb, first_spelling):
    store = lb.write_jsonl(
        tmp_path / "store.jsonl",
        [
            dict(r, record_id="L" + r["record_id"][1:])
            for r in lb.make_records(tasks=("cifar10",), compressors=("none",))
        ],
    )
    if first_spelling == "relative":  # the index was first built with another spelling of the store's path
        monkeypatch.chdir(tmp_path)
        _app(monkeypatch, records_dir, results=Path("store.jsonl"))
    at = _app(monkeypatch, records_dir, results=store)
    assert "local" in set(_ranking(at).entry)  # a newcomer's own run is on the page without a click
    at.checkbox(key="local").uncheck().run()
    assert "local" not in set(_ranking(at).entry)


def test_the_whole_ranking_is_visible_and_the_detail_is_a_card(app):
    card = next(d.value for d in app.main.dataframe if list(d.value.columns) == ["", "value"])
    fields = dict(zip(card.iloc[:, 0], card.value))
    assert {"entry", "submitted by", "compressor", "setup", "machine and load", "code version", "plugin source"} <= set(
        fields
    )
    assert "test-cpu" in fields["machine and load"] and "load 1.5" in fields["machine and load"]
    table = _ranking(app)
    assert all("load 1.5" in v for v in table["measured on (load)"])


def test_an_entry_in_the_url_picks_its_rows_and_card(monkeypatch, records_dir):
    monkeypatch.setenv("MPCBENCH_RECORDS", str(records_dir))
    monkeypatch.setenv("MPCBENCH_RESULTS", "")
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params["entry"] = "hostile-entry"
    at.run()
    assert not at.exception
    assert at.selectbox(key="detail").value.startswith("hostile-entry / ")
    assert any(lbl.startswith("hostile-entry / ") for lbl in at.multiselect(key="curves").value)


def test_the_link_to_a_fresh_entry_opens_its_task_tier_and_setup_with_its_rows(monkeypatch, tmp_path, lb):
    """``?entry=`` (what submit's preview opens): a plugin run like the maintainers' is shown among their
    rows, highlighted; one run under torchrun on 4 stages (a setup of its own) opens that setup, not the
    maintainers' 3-stage one without it. Without a link the page opens on the setup with the most compressors."""
    records = tmp_path / "records"
    lb.write_entry(records, "mpcbench-baselines", lb.make_records())
    for entry, run in (("my-plugin", {}), ("my-torchrun", {"n_stages": 4, "mode": "torchrun"})):
        mine = [lb.make_record("shakespeare", "topk(ratio=0.05)", s, record_id=f"{entry}-{s}") for s in (0, 1, 2)]
        for rec in mine:
            rec["run"] = {**rec["run"], **run}
        lb.write_entry(records, entry, mine)
    monkeypatch.setenv("MPCBENCH_RECORDS", str(records))
    monkeypatch.setenv("MPCBENCH_RESULTS", "")

    def opened(entry: str | None) -> AppTest:
        at = AppTest.from_file(str(APP), default_timeout=60)
        at.query_params.update({"entry": entry} if entry else {"task": "shakespeare"})
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        return at

    at = opened("my-plugin")
    assert (at.selectbox(key="task").value, at.selectbox(key="tier").value) == ("shakespeare", "quick")
    assert at.selectbox(key="setup").value.startswith("3 stages")
    table = _ranking(at)
    assert "my-plugin" in set(table.entry) and {"none", "fp16"} <= set(table.compressor)
    assert any(t.value.startswith("Highlighted: the 1 row(s) of entry my-plugin") for t in at.text)
    at = opened("my-torchrun")
    assert at.selectbox(key="setup").value.startswith("4 stages")
    assert "topk(ratio=0.05)" in set(_ranking(at).compressor)
    assert opened(None).selectbox(key="setup").value.startswith("3 stages")


def test_screenshot_view_options_become_url_parameters():
    import pytest as _pytest

    from leaderboard.screenshot import view_query

    assert view_query(task="sst2", rule="pareto", network="1Gbps", entry="e") == {
        "task": "sst2",
        "rule": "pareto",
        "entry": "e",
        "network": "1Gbps",
    }
    q = view_query(network="300Mbps/2ms")
    assert q["network"] == "custom" and float(q["bw"]) == 3e8 and float(q["lat"]) == 0.002
    with _pytest.raises(ValueError, match="BANDWIDTH/LATENCY"):
        view_query(network="fast/soon")


def test_time_to_quality_draws_seeds_the_baseline_and_the_tables_times(app):
    """Issue 24: seed curves, the baseline always drawn, and the table's time-to-target on the
    target line (mean of the seeds' crossings: the plot and the table agree to the digit)."""
    app.selectbox(key="rule").select("time_to_target").run()
    assert any(lbl.endswith("/ none") for lbl in app.multiselect(key="curves").value)
    chart = next(
        json.loads(e.proto.spec) | {"_proto": e.proto}
        for e in app.main
        if getattr(e, "type", None) == "vega_lite_chart" and "modeled wall-clock seconds" in e.proto.spec
    )

    def layer_data(pred):
        layer = next(lay for lay in chart["layer"] if pred(lay))
        raw = next(d.data.data for d in chart["_proto"].datasets if d.name == layer["data"]["name"])
        return pa.ipc.open_stream(raw).read_all().to_pandas()

    seeds = layer_data(lambda lay: lay.get("encoding", {}).get("detail", {}).get("field") == "seed")
    assert seeds.groupby("label").seed.nunique().max() == 3  # every seed's curve (the fixtures' 3 seeds)
    marks = layer_data(lambda lay: isinstance(lay.get("mark"), dict) and lay["mark"].get("shape") == "diamond")
    table = _ranking(app).set_index("compressor")
    for r in marks.itertuples(index=False):
        compressor = r.label.split(" / ")[1]
        shown = table.loc[compressor, "time-to-target @ 1Gbps"]
        if isinstance(shown, pd.Series):
            continue  # two entries with this compressor: matched by label in the app
        expected = f"{r.time_s:.1f} s" if r.sd != r.sd else f"{r.time_s:.1f} ± {r.sd:.1f} s"
        assert shown.startswith(expected), (shown, r.time_s, r.sd)


def test_hardware_selector_projects_the_rows_and_says_so(app):
    """Measured by default; picking an H100 shows the projected table, labelled, with its assumptions."""
    assert app.selectbox(key="hardware").value == "this machine (measured)"
    assert app.selectbox(key="model_size").disabled
    at = app.selectbox(key="hardware").set_value("h100-sxm").run()
    assert not at.exception, [e.value for e in at.exception]
    captions = [c.value for c in at.caption if "PROJECTED onto h100-sxm" in c.value]
    assert captions and "quality and steps to target are measured" in captions[0]
    assert any("peak 989 TFLOP/s" in t.value for t in at.text)  # the assumptions, one click away
    projected = [d.value for d in at.dataframe if "step (projected)" in d.value.columns]
    assert projected and len(projected[0]) > 0
