"""Hostile and broken submission files: each is skipped with a one-line reason, the rest loads."""

from __future__ import annotations

import json
import os

import pytest

from leaderboard import submissions
from leaderboard.submissions import load_all, load_entries, load_entry, load_store, plugin_file_hash


def _reasons(problems) -> str:
    return "\n".join(str(p) for p in problems)


def _one_line(problems) -> None:
    for p in problems:
        assert "\n" not in p.reason and p.reason, p


def test_good_entries_load_with_attribution(tmp_path, lb):
    recs = lb.make_records()
    lb.write_entry(tmp_path, "team-a", recs[:12], name="Team A", submitter="alice")
    lb.write_entry(tmp_path, "team-b", recs[12:], submitter="bob", description="multi\nline description")
    (tmp_path / "README.md").write_text("# not an entry")
    (tmp_path / ".hidden").mkdir()
    records, problems = load_entries(tmp_path)
    assert problems == []
    assert len(records) == len(recs)
    assert {r["entry"] for r in records} == {"team-a", "team-b"}
    a = next(r for r in records if r["entry"] == "team-a")
    assert a["submitter"] == "alice" and a["entry_info"]["name"] == "Team A" and a["entry_info"]["date"] == "2026-01-15"


def test_missing_records_folder_is_an_empty_leaderboard(tmp_path):
    assert load_entries(tmp_path / "nope") == ([], [])


def test_malformed_json_line_skips_only_that_line(tmp_path, lb):
    d = lb.write_entry(tmp_path, "e", lb.make_records(tasks=("cifar10",), compressors=("none",)))
    with open(d / "results.jsonl", "ab") as f:
        f.write(b'{"schema": "mpcbench.record/1", "task": "cifar10",\n')  # truncated
        f.write(b"[1, 2, 3]\n")  # JSON, but not an object
        f.write(b"\xff\xfe not utf8\n")
        f.write(json.dumps(lb.make_record("cifar10", "fp16", 0)).encode() + b"\n")
    records, problems = load_entries(tmp_path)
    assert len(records) == 4
    text = _reasons(problems)
    assert "results.jsonl:4: invalid JSON: Expecting property name" in text
    assert "results.jsonl:5: invalid record: record must be a JSON object, got list" in text
    assert "results.jsonl:6: not UTF-8 text" in text
    assert len(problems) == 3
    _one_line(problems)


def test_yaml_object_construction_is_rejected_not_executed(tmp_path, lb):
    target = tmp_path / "pwned"
    payloads = [
        f'name: !!python/object/apply:os.system ["touch {target}"]\nsubmitter: x\ndate: 2026-01-01\n',
        f'name: !!python/object/new:subprocess.check_call [["touch", "{target}"]]\nsubmitter: x\ndate: 2026-01-01\n',
        f'!!python/object/apply:os.system ["touch {target}"]\n',
        "name: !!python/name:os.system\nsubmitter: x\ndate: 2026-01-01\n",
    ]
    for i, text in enumerate(payloads):
        d = tmp_path / "records" / f"evil{i}"
        lb.write_entry(tmp_path / "records", f"evil{i}", [lb.make_record("cifar10", "fp16", i)])
        (d / "entry.yaml").write_text(text)
    lb.write_entry(tmp_path / "records", "good", [lb.make_record("cifar10", "none", 0)])
    records, problems = load_entries(tmp_path / "records")
    assert not target.exists()
    assert [r["entry"] for r in records] == ["good"]
    assert len(problems) == 4
    for p in problems:
        assert "entry skipped: entry.yaml is not valid (safe) YAML: could not determine a constructor" in p.reason
        assert "tag:yaml.org,2002:python/" in p.reason
    _one_line(problems)


def test_malformed_yaml_and_bad_entry_fields(tmp_path, lb):
    root = tmp_path / "records"
    cases = {
        "broken-yaml": ("name: [unclosed\nsubmitter: x\n", "not valid (safe) YAML"),
        "not-mapping": ("- just\n- a list\n", "must be a mapping of fields, got list"),
        "no-submitter": ("name: x\ndate: 2026-01-01\n", "missing required field 'submitter'"),
        "unknown-field": (
            "name: x\nsubmitter: y\ndate: 2026-01-01\nscore: 99\n",
            "unknown field(s) ['score']; valid fields: name, submitter, date",
        ),
        "wrong-type": ("name: [1, 2]\nsubmitter: y\ndate: 2026-01-01\n", "field 'name' must be a string, got list"),
        "bad-date": ("name: x\nsubmitter: y\ndate: yesterday\n", "'date' must be YYYY-MM-DD"),
        "huge-name": (f"name: {'x' * 500}\nsubmitter: y\ndate: 2026-01-01\n", "'name' is longer than 100"),
        "alias-bomb": (
            "a: &a [x, x]\nb: &b [*a, *a]\nname: *b\nsubmitter: y\ndate: 2026-01-01\n",
            "must not use YAML anchors or aliases",
        ),
    }
    for name, (text, _) in cases.items():
        d = lb.write_entry(root, name, [lb.make_record("cifar10", "none", 0, record_id=name)])
        (d / "entry.yaml").write_text(text)
    (root / "no-yaml").mkdir()
    lb.write_jsonl(root / "no-yaml" / "r.jsonl", [lb.make_record("cifar10", "fp16", 0)])
    lb.write_entry(root, "no-results", [])
    (root / "no-results" / "results.jsonl").unlink()
    lb.write_entry(root, "good", [lb.make_record("cifar10", "none", 1)])
    records, problems = load_entries(root)
    assert [r["entry"] for r in records] == ["good"]
    by_path = {os.path.basename(p.path): p.reason for p in problems}
    for name, (_, reason) in cases.items():
        assert reason in by_path[name], (name, by_path[name])
    assert "missing entry.yaml" in by_path["no-yaml"]
    assert "no *.jsonl results file" in by_path["no-results"]
    _one_line(problems)


@pytest.mark.parametrize(
    "override,reason",
    [
        ({"seed": "0"}, "field 'seed' must be int, got str"),
        ({"final_metric": "high"}, "field 'final_metric' must be int/float, got str"),
        ({"higher_is_better": 1}, "field 'higher_is_better' must be bool"),
        ({"final_metric": 1e300 * 10}, "out of range"),  # inf
        ({"final_metric": 1e30}, "out of range"),
        ({"compressor": "x" * 5000}, "string longer than 2000 characters"),
        ({"curve": [0] * 100_001}, "list longer than 100000"),
        ({"bytes": {"forward": {"raw": -1, "wire": 0}}}, "bytes.forward.raw must be a non-negative integer"),
        ({"schema": "mpcbench.record/0"}, "schema must be 'mpcbench.record/1'"),
        ({"status": "failed", "error": "two\nlines"}, "'error' must be one line"),
        ({"model_version": "3"}, "model_version must be a positive integer"),
        ({"model_version": 0}, "model_version must be a positive integer"),
    ],
)
def test_wrong_types_and_huge_values_are_rejected(tmp_path, lb, override, reason):
    good = lb.make_record("cifar10", "none", 0)
    bad = dict(lb.make_record("cifar10", "fp16", 0))
    bad.update(override)
    path = tmp_path / "store.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    records, problems = load_store(path)
    assert [r["record_id"] for r in records] == [good["record_id"]]
    assert len(problems) == 1 and problems[0].path.endswith("store.jsonl:2")
    assert reason in problems[0].reason
    _one_line(problems)


def test_missing_fields_are_named(tmp_path, lb):
    recs = []
    for i, field in enumerate(("task", "record_id", "final_metric", "bytes", "provenance")):
        r = dict(lb.make_record("cifar10", "fp16", i))
        del r[field]
        recs.append(r)
    path = lb.write_jsonl(tmp_path / "s.jsonl", recs + [lb.make_record("cifar10", "none", 0)])
    records, problems = load_store(path)
    assert len(records) == 1 and len(problems) == 5
    for p, field in zip(problems, ("task", "record_id", "final_metric", "bytes", "provenance")):
        assert f"missing field {field!r}" in p.reason


def test_json_bombs(tmp_path, lb):
    good = json.dumps(lb.make_record("cifar10", "none", 0))
    lines = [
        '{"schema": ' + "9" * 10_000 + "}",  # int larger than Python will parse from text
        "[" * 100_000 + "]" * 100_000,  # nesting deeper than the parser's recursion limit
        '{"a": ' * 20 + "1" + "}" * 20,  # valid JSON nested deeper than a record may be
        '{"final_metric": NaN}',
        good,
    ]
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(lines) + "\n")
    records, problems = load_store(path)
    assert len(records) == 1 and len(problems) == 4
    assert "nested too deeply" in problems[2].reason
    _one_line(problems)


def test_html_and_script_in_names_survive_as_inert_text(tmp_path, lb):
    html = lb.HOSTILE_NAME
    rec = lb.make_record("cifar10", html, 0, record_id="<b>id</b>")
    lb.write_entry(
        tmp_path, "e", [rec], name=html, submitter="<script>alert(1)</script>", description="[x](javascript:alert(1))"
    )
    records, problems = load_entries(tmp_path)
    assert problems == []
    assert records[0]["compressor"] == html and records[0]["entry_info"]["name"] == html
    assert records[0]["submitter"] == "<script>alert(1)</script>"


def test_oversized_files_and_lines_are_skipped(tmp_path, lb):
    d = lb.write_entry(tmp_path, "e", [lb.make_record("cifar10", "none", 0)])
    with open(d / "huge.jsonl", "wb") as f:  # sparse: no disk or time spent
        f.truncate(submissions.MAX_FILE_BYTES + 1)
    long_rec = dict(lb.make_record("cifar10", "fp16", 0), description="x" * submissions.MAX_LINE_BYTES)
    long_line = json.dumps(long_rec)
    (d / "long.jsonl").write_text(long_line + "\n" + json.dumps(lb.make_record("cifar10", "fp16", 1)) + "\n")
    big_yaml = lb.write_entry(tmp_path, "big-yaml", [lb.make_record("cifar10", "fp16", 2)])
    (big_yaml / "entry.yaml").write_text("name: x\n" + "#" * submissions.MAX_ENTRY_YAML_BYTES + "\n")
    records, problems = load_entries(tmp_path)
    assert sorted((r["compressor"], r["seed"]) for r in records) == [("fp16", 1), ("none", 0)]
    text = _reasons(problems)
    assert f"huge.jsonl: file is {submissions.MAX_FILE_BYTES + 1} bytes, over the" in text
    assert "long.jsonl:1: record is" in text and "over the 2097152-byte limit" in text
    assert "big-yaml: entry skipped: entry.yaml: file is" in text
    assert len(problems) == 3


def test_symlinks_and_bad_folder_names_are_refused(tmp_path, lb):
    root = tmp_path / "records"
    d = lb.write_entry(root, "e", [lb.make_record("cifar10", "none", 0)])
    secret = tmp_path / "secret.jsonl"
    lb.write_jsonl(secret, [lb.make_record("cifar10", "fp16", 0)])
    (d / "link.jsonl").symlink_to(secret)
    lb.write_entry(root, "<i>bad name", [lb.make_record("cifar10", "fp16", 1)])
    (root / "linked-entry").symlink_to(d)
    records, problems = load_entries(root)
    assert [(r["entry"], r["compressor"]) for r in records] == [("e", "none")]
    text = _reasons(problems)
    assert "link.jsonl: symlinks are not allowed" in text
    assert "entry folder name '<i>bad name' is not a valid entry id" in text
    assert "linked-entry: an entry must be a folder (not a symlink)" in text


def test_plugin_hash_is_checked(tmp_path, lb):
    root = tmp_path / "records"
    src = "from compressors.builtins.baseline import NoCompression  # plugin\n"
    for name, info in {
        "ok": {"plugin": "plugin.py", "plugin_hash": None},
        "tampered": {"plugin": "plugin.py", "plugin_hash": "0" * 16},
        "no-hash": {"plugin": "plugin.py"},
        "escape": {"plugin": "../ok/plugin.py", "plugin_hash": "0" * 16},
        "module": {"plugin": "my_pkg.my_comp"},
        "bad-module": {"plugin": "os; rm -rf /"},
    }.items():
        d = root / name
        d.mkdir(parents=True)
        (d / "plugin.py").write_text(src)
        if info.get("plugin_hash", "") is None:
            info["plugin_hash"] = plugin_file_hash(d / "plugin.py")
        lb.write_entry(root, name, [lb.make_record("cifar10", "none", 0, record_id=name)], **info)
    records, problems = load_entries(root)
    assert sorted(r["entry"] for r in records) == ["module", "ok"]
    by = {os.path.basename(p.path): p.reason for p in problems}
    assert "does not match plugin.py" in by["tampered"]
    assert "needs 'plugin_hash'" in by["no-hash"]
    assert "must be inside the entry folder" in by["escape"]
    assert "must be a .py file or a module name" in by["bad-module"]


def test_plugin_file_hash_matches_registry_source_hash(tmp_path):
    from compressors.registry import load_plugin, source_hash

    path = tmp_path / "lb_hash_plugin.py"
    path.write_text(
        "from compressors.api import Compressor\nfrom compressors.registry import register\n\n\n"
        "@register('lb_hash_probe')\nclass Probe(Compressor):\n"
        "    def compress(self, x, info):\n        return (x,)\n\n"
        "    def decompress(self, payload, info):\n        return payload[0]\n"
    )
    load_plugin(str(path))
    assert plugin_file_hash(path) == source_hash("lb_hash_probe")


def test_duplicate_record_ids_across_entries(tmp_path, lb):
    rec = lb.make_record("cifar10", "none", 0)
    lb.write_entry(tmp_path, "a-original", [rec])
    lb.write_entry(tmp_path, "b-copycat", [rec, lb.make_record("cifar10", "fp16", 0)])
    records, problems = load_entries(tmp_path)
    assert [(r["entry"], r["compressor"]) for r in records] == [("a-original", "none"), ("b-copycat", "fp16")]
    assert len(problems) == 1 and "duplicate record_id" in problems[0].reason and "a-original" in problems[0].reason


def test_store_truncated_last_line_and_missing_file(tmp_path, lb):
    recs = lb.make_records(tasks=("cifar10",), compressors=("none",))
    path = tmp_path / "store.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs) + json.dumps(recs[0])[:50])  # killed mid-write
    records, problems = load_store(path)
    assert len(records) == 3 and all(r["entry"] == "local" for r in records)
    assert len(problems) == 1 and problems[0].path.endswith(":4")
    assert load_store(tmp_path / "nope.jsonl") == (
        [],
        [submissions.Problem(str(tmp_path / "nope.jsonl"), "no such results file")],
    )


def test_load_all_prefers_committed_entries_over_store_copies(tmp_path, lb):
    recs = lb.make_records(tasks=("cifar10",), compressors=("none", "fp16"))
    lb.write_entry(tmp_path / "records", "baselines", recs[:3])  # the lead committed the baselines
    store = lb.write_jsonl(tmp_path / "store.jsonl", recs)  # the local store still has them
    records, problems = load_all([store], [tmp_path / "records"])
    assert problems == []
    assert sorted((r["entry"], r["compressor"]) for r in records) == sorted(
        [("baselines", "none")] * 3 + [("local", "fp16")] * 3
    )
    # two stores stay apart
    other = lb.write_jsonl(tmp_path / "other.jsonl", [lb.make_record("cifar10", "topk(ratio=0.1)", 0)])
    records, _ = load_all([store, other])
    assert {r["entry"] for r in records} == {"local:store", "local:other"}


def test_load_entry_for_validate(tmp_path, lb):
    d = lb.write_entry(tmp_path, "mine", lb.make_records(tasks=("cifar10",)))
    records, problems = load_entry(d)
    assert len(records) == 12 and problems == []


def test_records_must_come_from_the_committed_plugin(tmp_path, lb):
    d = tmp_path / "mine"
    d.mkdir()
    (d / "plugin.py").write_text("# my compressor\n")
    h = plugin_file_hash(d / "plugin.py")
    same, other, builtin = (lb.make_record("cifar10", c, 0) for c in ("fp16", "topk(ratio=0.1)", "none"))
    same["provenance"]["plugin_hashes"]["plugin:/home/me/plugin.py"] = h
    other["provenance"]["plugin_hashes"]["plugin:/home/me/plugin.py"] = "f" * 16  # an older version of the plugin
    lb.write_entry(tmp_path, "mine", [same, other, builtin], plugin="plugin.py", plugin_hash=h)
    records, problems = load_entries(tmp_path)
    assert sorted(r["compressor"] for r in records) == ["fp16", "none"]
    assert len(problems) == 1 and "record was run with other plugin code" in problems[0].reason
