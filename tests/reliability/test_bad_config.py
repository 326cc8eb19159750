"""Bad configuration: one-line errors that name the problem, before any training.

Through ``mpcbench run`` (in process): malformed or hostile matrix YAML, unknown task and
compressor names, bad or out-of-range parameters and settings. Each must exit with code 2
and exactly one ``mpcbench: error: ...`` line on stderr, write no results store and no cell
log, and never reach a cell: the runner's ``run_cell`` and the runtime's ``train`` are
replaced by tripwires. The same for ``pytest suite`` (a one-line collection error) and for
``suite.pipeline.runtime.run`` called directly with a bad ``CellConfig``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from reliability_support import TINY

from suite.bench.cli import main

pytest_plugins = ["pytester"]

SUITE = Path(__file__).resolve().parents[2] / "suite"


class Tripwire(AssertionError):
    pass


@pytest.fixture
def no_training(monkeypatch):
    """Fail loudly if anything tries to run a cell or train."""

    def trip(*args, **kwargs):
        raise Tripwire("training started despite a bad configuration")

    monkeypatch.setattr("suite.bench.executors.run_cell", trip)
    monkeypatch.setattr("suite.pipeline.runtime.train", trip)
    monkeypatch.setattr("suite.pipeline.runtime.run_single", trip)


def _cli_error(capsys, tmp_path, args: list[str]) -> str:
    store = tmp_path / "out" / "store.jsonl"
    rc = main(["run", "--plugin", TINY, "--results", str(store), "--no-progress", *args])
    out, err = capsys.readouterr()
    assert rc == 2, (out, err)
    assert err.startswith("mpcbench: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert not store.exists() and not (tmp_path / "out" / "store.logs").exists()
    return err


# (id, command-line arguments, expected text in the one-line error)
CLI_CASES = [
    (
        "unknown task",
        ["--task", "imagenet"],
        "unknown task 'imagenet'; valid tasks: cifar10, cola, mrpc, rte, shakespeare, sst2, stsb, tiny",
    ),
    (
        "unknown compressor",
        ["--task", "tiny", "--compressor", "nosuch"],
        "unknown compressor 'nosuch'; valid names: ae, aqsgd, bf16",
    ),
    (
        "code as a spec",
        ["--task", "tiny", "--compressor", "__import__('os')"],
        "unknown compressor '__import__'; valid names:",
    ),
    (
        "spec syntax",
        ["--task", "tiny", "--compressor", "topk(ratio=0.1"],
        "cannot parse compressor spec 'topk(ratio=0.1'",
    ),
    ("spec ** argument", ["--task", "tiny", "--compressor", "topk(**x)"], "spec 'topk(**x)': '**' is not allowed"),
    (
        "unknown parameter",
        ["--task", "tiny", "--compressor", "topk(rati=0.1)"],
        "topk: unknown parameter 'rati'; valid parameters: ratio, granularity",
    ),
    ("missing parameter", ["--task", "tiny", "--compressor", "ef"], "ef: missing required parameter(s) inner"),
    (
        "parameter below range",
        ["--task", "tiny", "--compressor", "topk(ratio=-0.5)"],
        "topk: parameter ratio=-0.5 must be a number in [1e-06, 1.0]",
    ),
    (
        "parameter above range",
        ["--task", "tiny", "--compressor", "quant(bits=99)"],
        "quant: parameter bits=99 must be an integer in [1, 8]",
    ),
    (
        "parameter wrong type",
        ["--task", "tiny", "--compressor", "quant(bits=4.5)"],
        "quant: parameter bits=4.5 must be an integer in [1, 8]",
    ),
    (
        "parameter bad choice",
        ["--task", "tiny", "--compressor", "quant(scale=diagonal)"],
        "parameter scale='diagonal' is not allowed; allowed values: tensor, row, block",
    ),
    (
        "compressor in a role it lacks",
        ["--task", "tiny", "--compressor", "ae"],
        "compressor 'ae' cannot compress the backward direction (activation_grad)",
    ),
    (
        "pseudo-gradient code that did not opt in",
        ["--task", "tiny", "--dp", "aqsgd", "--sync", "outer(h=2)"],
        "dp compressor 'aqsgd' cannot compress the dp direction (pseudo_grad)",
    ),
    (
        "stages out of range",
        ["--task", "tiny", "--stages", "9"],
        "task 'tiny' cannot be split into 9 stages; valid: 1, 2, 3, 4",
    ),
    ("steps zero", ["--task", "tiny", "--steps", "0"], "steps=0 must be an integer >= 1"),
    ("replicas zero", ["--task", "tiny", "--dp-size", "0"], "dp=0 must be an integer >= 1"),
    (
        "microbatches not dividing the batch",
        ["--task", "tiny", "--microbatches", "5"],
        "microbatches=5 does not divide the batch size 16; pick a divisor of 16 (task 'tiny', smoke tier)",
    ),
    ("negative seeds", ["--task", "tiny", "--seeds", "-1"], "--seeds: '-1' is not a seed count"),
    (
        "negative time limit",
        ["--task", "tiny", "--cell-timeout", "-5"],
        "--cell-timeout must be a finite number of seconds in (0, 604800], got -5.0",
    ),
    # issue 12, A12: nan and inf silently disabled the cell time limit
    (
        "A12 time limit nan",
        ["--task", "tiny", "--cell-timeout", "nan"],
        "--cell-timeout must be a finite number of seconds in (0, 604800], got nan",
    ),
    (
        "A12 time limit inf",
        ["--task", "tiny", "--cell-timeout", "inf"],
        "--cell-timeout must be a finite number of seconds in (0, 604800], got inf",
    ),
    # issue 12, A13: a 16-deep wrapper spec took over 120 s in --dry-run (each level doubled the work)
    (
        "A13 16-deep wrapper spec",
        ["--task", "tiny", "--compressor", "ef(" * 16 + "topk(ratio=0.1)" + ")" * 16],
        "nests 17 levels of parentheses; at most 8 are allowed",
    ),
    # issue 12, A14: a billion seeds was built as a list (killed by the OOM killer)
    (
        "A14 a billion seeds",
        ["--task", "tiny", "--seeds", "1000000000"],
        "--seeds: '1000000000' asks for 1000000000 seeds; at most 1000 per run",
    ),
    (
        "A14 a million-seed range",
        ["--task", "tiny", "--seeds", "0:1000000"],
        "--seeds: '0:1000000' asks for 1000000 seeds; at most 1000 per run",
    ),
    (
        "A14 seed too large",
        ["--task", "tiny", "--seeds", "5,99999999999"],
        "--seeds: seed 99999999999 is over the limit of 2147483647",
    ),
    (
        "A14 too many cells",
        [
            "--task",
            "tiny",
            "--seeds",
            "1000",
            *[a for b in range(11) for a in ("--compressor", f"topk(ratio=0.{b + 1:02d})")],
        ],
        "1 task(s) x 12 compressor entries x 1000 seed(s) is more than 10000 cells",
    ),
    (
        "unknown tier",
        ["--task", "tiny", "--tier", "huge"],
        "unknown tier 'huge'; valid tiers: smoke, quick, plateau, scale, gpu, full",
    ),
]


@pytest.mark.parametrize("name, args, expected", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_bad_command_line_is_one_line_before_training(capsys, tmp_path, no_training, tally, name, args, expected):
    with tally.fault("bad configuration", f"command line: {name}"):
        err = _cli_error(capsys, tmp_path, args)
        assert expected in err, err


# (id, matrix file bytes, expected text)
MATRIX_CASES = [
    (
        "malformed YAML",
        b"schema: mpcbench.matrix/1\ntiers:\n  smoke: {tasks: [tiny], seeds: 1, compressors: [none\n",
        "malformed YAML at line 4, column 1: expected ',' or ']'",
    ),
    (
        "YAML tag constructing an object",
        b'schema: mpcbench.matrix/1\ntiers: !!python/object/apply:os.system ["touch {canary}"]\n',
        "could not determine a constructor for the tag 'tag:yaml.org,2002:python/object/apply:os.system'",
    ),
    ("not UTF-8", b"\x00\xff garbage", "not UTF-8 text"),
    ("tiers not a mapping", b"schema: mpcbench.matrix/1\ntiers:\n  - smoke\n", "'tiers' must map tier names to tiers"),
    (
        "missing schema",
        b"tiers:\n  smoke: {tasks: [tiny], seeds: 1, compressors: [none]}\n",
        "'schema' must be 'mpcbench.matrix/1', got None",
    ),
    (
        "unknown tier key",
        b"schema: mpcbench.matrix/1\ntiers:\n  smoke: {tasks: [tiny], seeds: 1, compressors: [none], epochs: 3}\n",
        "tiers.smoke: unknown key(s) ['epochs']",
    ),
    (
        "unknown entry key",
        b"schema: mpcbench.matrix/1\ntiers:\n  smoke: {tasks: [tiny], seeds: 1, compressors: [{forward: fp16, sideways: fp8}]}\n",
        "tiers.smoke.compressors[0]: unknown key(s) ['sideways']",
    ),
    (
        "unknown task",
        b"schema: mpcbench.matrix/1\ntiers:\n  smoke: {tasks: [imagenet], seeds: 1, compressors: [none]}\n",
        "unknown task 'imagenet'; valid tasks:",
    ),
    (
        "unknown compressor",
        b"schema: mpcbench.matrix/1\ntiers:\n  smoke: {tasks: [tiny], seeds: 1, compressors: [nosuch]}\n",
        "unknown compressor 'nosuch'; valid names:",
    ),
    (
        "out-of-range parameter",
        b'schema: mpcbench.matrix/1\ntiers:\n  smoke: {tasks: [tiny], seeds: 1, compressors: ["topk(ratio=2)"]}\n',
        "topk: parameter ratio=2 must be a number in [1e-06, 1.0]",
    ),
    (
        "negative seeds",
        b"schema: mpcbench.matrix/1\ntiers:\n  smoke: {tasks: [tiny], seeds: -2, compressors: [none]}\n",
        "tiers.smoke.seeds: -2 is not a seed count",
    ),
    (
        "negative time limit",
        b"schema: mpcbench.matrix/1\ntiers:\n  smoke: {tasks: [tiny], seeds: 1, cell_timeout_s: -1, compressors: [none]}\n",
        "tiers.smoke.cell_timeout_s must be a finite number of seconds in (0, 604800], got -1",
    ),
    # issue 12, A15: 'seeds: "0:1000000"' made `mpcbench validate` and planning run for minutes
    (
        "A15 a million seeds in the matrix",
        b'schema: mpcbench.matrix/1\ntiers:\n  smoke: {tasks: [tiny], seeds: "0:1000000", compressors: [none]}\n',
        "tiers.smoke.seeds: '0:1000000' asks for 1000000 seeds; at most 1000 per run",
    ),
    (
        "A12 time limit .inf in the matrix",
        b"schema: mpcbench.matrix/1\ntiers:\n  smoke: {tasks: [tiny], seeds: 1, cell_timeout_s: .inf, compressors: [none]}\n",
        "tiers.smoke.cell_timeout_s must be a finite number of seconds in (0, 604800], got inf",
    ),
    (
        "stages out of range",
        b"schema: mpcbench.matrix/1\ntiers:\n  smoke: {tasks: [tiny], seeds: 1, compressors: [none], settings: {stages: 9}}\n",
        "task 'tiny' cannot be split into 9 stages",
    ),
    (
        "microbatches not dividing",
        b"schema: mpcbench.matrix/1\ntiers:\n  smoke: {tasks: [tiny], seeds: 1, compressors: [none], settings: {microbatches: 3}}\n",
        "microbatches=3 does not divide the batch size 16; pick a divisor of 16 (task 'tiny', smoke tier)",
    ),
]


@pytest.mark.parametrize("name, text, expected", MATRIX_CASES, ids=[c[0] for c in MATRIX_CASES])
def test_bad_matrix_file_is_one_line_before_training(capsys, tmp_path, no_training, tally, name, text, expected):
    canary = tmp_path / "pwned"
    matrix = tmp_path / "matrix.yaml"
    matrix.write_bytes(text.replace(b"{canary}", str(canary).encode()))
    with tally.fault("bad configuration", f"matrix file: {name}"):
        err = _cli_error(capsys, tmp_path, ["--matrix", str(matrix)])
        assert expected in err, err
        assert not canary.exists()  # the YAML tag was refused, not executed


def test_pytest_entry_reports_a_bad_matrix_in_one_line(pytester, tally):
    """``pytest suite --matrix bad.yaml``: the same one line, as a collection error."""
    matrix = pytester.path / "m.yaml"
    matrix.write_bytes(MATRIX_CASES[0][1])  # malformed YAML
    with tally.fault("bad configuration", "pytest suite: malformed matrix YAML"):
        result = pytester.runpytest_inprocess(
            str(SUITE), "-p", "no:cacheprovider", "--matrix", str(matrix), "--plugin", TINY, "--results", "s.jsonl"
        )
        assert result.ret == pytest.ExitCode.INTERRUPTED
        out = result.stdout.str()
        lines = [l for l in out.splitlines() if "mpcbench:" in l]
        assert lines and "m.yaml: malformed YAML at line 4, column 1" in lines[0], out
        assert "Traceback" not in out and "During handling" not in out
        assert not (pytester.path / "s.jsonl").exists()


@pytest.mark.parametrize(
    "fields, expected",
    [
        ({"schedule": "zigzag"}, "unknown schedule 'zigzag'; valid schedules: gpipe, 1f1b"),
        ({"device": "tpu"}, "unknown device 'tpu'; valid devices: cpu, cuda, auto"),
        ({"mode": "mpi"}, "unknown mode 'mpi'; valid modes: single, torchrun"),
        ({"seed": -1}, "seed=-1 must be an integer >= 0"),
        ({"seed": 10**18}, "seed=1000000000000000000 is over the limit of 2147483647"),
        ({"tier": "huge"}, "unknown tier 'huge'; valid tiers: smoke, quick, gpu, full"),
        (
            {"plugins": ("/nonexistent/plugin.py",)},
            "plugin '/nonexistent/plugin.py' failed to import: FileNotFoundError",
        ),
    ],
)
def test_runtime_refuses_a_bad_cell_config_before_training(no_training, tally, fields, expected):
    from suite.pipeline.config import CellConfig, ConfigError
    from suite.pipeline.runtime import run

    with tally.fault("bad configuration", f"CellConfig: {', '.join(f'{k}={v!r}' for k, v in fields.items())}"):
        with pytest.raises(ConfigError) as err:
            run(CellConfig(task="tiny", **{"plugins": (TINY,), **fields}))
        assert expected in str(err.value) and "\n" not in str(err.value)
