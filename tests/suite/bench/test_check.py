"""``mpcbench check PLUGIN [SPEC...]``: the generic compressor contract on one plugin, with pytest's output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "mpcbench-signsgd"

GOOD = '''
import torch
from compressors import Compressor, check_finite, register


@register("halfway")
class Halfway(Compressor):
    """fp16 on the wire."""

    def compress(self, x, info):
        check_finite(x, info, self.name)
        return (x.detach().to(torch.float16),)

    def decompress(self, payload, info):
        return payload[0].to(info.dtype)
'''

# Each breaks one clause of the contract that the old generic tests did not check.
BROKEN = '''
import torch
from compressors import Compressor, check_finite, register


@register("leaky")
class Leaky(Compressor):
    """Keeps the previous input in a class attribute: every instance shares it."""

    last = {}

    def compress(self, x, info):
        check_finite(x, info, self.name)
        prev = Leaky.last.get(tuple(x.shape), torch.zeros_like(x))
        Leaky.last[tuple(x.shape)] = x.detach().clone()
        return ((x.detach() - 0.01 * prev).to(torch.float16),)

    def decompress(self, payload, info):
        return payload[0].to(info.dtype)


@register("noisy")
class Noisy(Compressor):
    """Dithers with the global RNG instead of a generator seeded from info.seed."""

    def compress(self, x, info):
        check_finite(x, info, self.name)
        return ((x.detach() + 1e-3 * torch.rand_like(x)).to(torch.float16),)

    def decompress(self, payload, info):
        return payload[0].to(info.dtype)


@register("evalstep")
class EvalStep(Compressor):
    """Counts calls, evaluation passes included, and scales by the count."""

    def __init__(self):
        self.calls = 0

    def compress(self, x, info):
        check_finite(x, info, self.name)
        self.calls += 1
        return ((x.detach() * (1 + 1e-3 * self.calls)).to(torch.float16),)

    def decompress(self, payload, info):
        return payload[0].to(info.dtype)
'''


def _check(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, "-m", "suite", "check", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_check_passes_the_example_plugin_folder_and_a_file_plugin(tmp_path):
    (tmp_path / "halfway.py").write_text(GOOD)
    r = _check(str(EXAMPLE), cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    assert (
        "contract.py::test_roundtrip_keeps_shape_dtype_device_and_error_bound[signsgd-weight_grad-cpu] PASSED"
        in r.stdout
    )
    assert "failed" not in r.stdout.splitlines()[-1]
    r = _check("halfway.py", cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    assert "test_instances_share_no_state[halfway] PASSED" in r.stdout
    assert "signsgd" not in r.stdout  # only the plugin's compressors


def test_check_fails_a_broken_plugin_naming_each_broken_clause(tmp_path):
    (tmp_path / "broken.py").write_text(BROKEN)
    r = _check("broken.py", cwd=tmp_path)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr
    failed = {ln.split(" - ")[0] for ln in r.stdout.splitlines() if ln.startswith("FAILED ")}
    assert any("test_instances_share_no_state[leaky]" in f for f in failed), failed
    assert any("test_same_seed_gives_same_payload[noisy]" in f for f in failed), failed
    assert any("test_evaluation_leaves_state_alone[evalstep]" in f for f in failed), failed
    assert "leaky: step 0 beside another instance pair: payload tensor 0 differs" in r.stdout


WIDE = """
from compressors import Compressor, register


@register("wide")
class Wide(Compressor):
    def compress(self, x, info):
        return (x.detach().double(),)  # twice the input's bytes

    def decompress(self, payload, info):
        return payload[0].to(info.dtype)
"""
WIDE_LINE = (
    "wide: compress: payload tensor 0 is torch.float64, wider than the input's torch.float32: "
    "cast it to the input's dtype or smaller"
)


def test_check_names_a_float64_payload_and_the_fix_without_a_tensor_dump(tmp_path):
    (tmp_path / "wide.py").write_text(WIDE)
    r = _check("wide.py", "--pytest=-k", "--pytest=payload_bytes or roundtrip_keeps", cwd=tmp_path)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr
    assert WIDE_LINE in r.stdout, r.stdout[-3000:]
    assert "tensor([" not in r.stdout  # numbers and dtypes, not the payload's values


LISTED = """
import torch
from compressors import Compressor, register


@register("listed")
class Listed(Compressor):
    def compress(self, x, info):
        return x.flatten().tolist()  # a Python list of every value

    def decompress(self, payload, info):
        return torch.tensor(payload, dtype=info.dtype).reshape(info.shape)
"""


def test_check_summarizes_a_python_list_payload_in_one_short_line(tmp_path):
    """A list of a tensor's values once printed 425 KB (88,000-character lines): its type and length only."""
    (tmp_path / "listed.py").write_text(LISTED)
    r = _check("listed.py", "--pytest=-k", "--pytest=roundtrip_keeps or autograd", cwd=tmp_path)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr
    assert "listed: compress must return a tuple of tensors, got list of 49152 float" in r.stdout, r.stdout[-3000:]
    assert max(map(len, r.stdout.splitlines())) < 300 and len(r.stdout) < 20_000


def test_check_one_spec_and_a_plugin_that_does_not_import(tmp_path):
    (tmp_path / "broken.py").write_text(BROKEN)
    r = _check("broken.py", "noisy", "--pytest=-k", "--pytest=same_seed", cwd=tmp_path)
    assert r.returncode == 1 and "test_same_seed_gives_same_payload[noisy] FAILED" in r.stdout, r.stdout[-3000:]
    assert "leaky" not in r.stdout

    (tmp_path / "typo.py").write_text("from compressors import register\n\ndef oops(:\n    pass\n")
    r = _check("typo.py", cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        f"mpcbench: error: plugin {str(tmp_path / 'typo.py')!r} failed to import: SyntaxError: invalid syntax "
        "(typo.py, line 3)"
    ]


def _pytest_script() -> list[str]:
    """The ``pytest`` script of this interpreter's environment, never one found on PATH.

    The README tells users to type ``pytest``: the environment it sets up must have the script
    (a venv that sees the system's site packages gets none, and PATH then reaches another Python).
    """
    here = Path(sys.executable).with_name("pytest")
    assert here.exists(), (
        f"{here} is missing: the environment running the tests has no pytest script (pip install pytest)"
    )
    return [str(here)]


@pytest.mark.parametrize("runner", ["pytest", "python -m pytest"])
def test_generic_tests_run_on_a_file_plugin_with_plain_pytest(tmp_path, runner):
    """``pytest tests/compressors/test_roundtrip.py --plugin FILE`` from the checkout (plain ``pytest`` too)."""
    runner = _pytest_script() if runner == "pytest" else [sys.executable, "-m", "pytest"]
    (tmp_path / "halfway.py").write_text(GOOD)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # as a fresh shell: only the ini's pythonpath
    r = subprocess.run(
        [
            *runner,
            "tests/compressors/test_roundtrip.py",
            "-p",
            "no:cacheprovider",
            "-q",
            "--plugin",
            str(tmp_path / "halfway.py"),
            "-k",
            "halfway or lists_the_builtins",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    assert "passed" in r.stdout.splitlines()[-1] and "error" not in r.stdout.splitlines()[-1]


ONE_NAN = """
import torch
from compressors import Compressor, check_finite, register


@register("onenan")
class OneNaN(Compressor):
    \"\"\"fp16 on the wire; the decoder writes one NaN.\"\"\"

    def compress(self, x, info):
        check_finite(x, info, self.name)
        return (x.detach().to(torch.float16),)

    def decompress(self, payload, info):
        y = payload[0].to(info.dtype).clone()
        if y.numel():
            y.view(-1)[0] = float("nan")
        return y
"""


def test_check_reports_one_nan_in_decompress_once_and_names_what_it_skips(tmp_path):
    """One bug, one failure: the clauses that meet the same NaN are skipped naming it (they were 15 failures)."""
    (tmp_path / "onenan.py").write_text(ONE_NAN)
    r = _check("onenan.py", cwd=tmp_path)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr
    failed = [ln for ln in r.stdout.splitlines() if ln.startswith("FAILED ")]
    assert len(failed) == 1, "\n".join(failed)
    # the failure's body names the NaN once; the short summary's FAILED line may repeat it when the
    # terminal is wide enough, so it is left out of the count
    body = "\n".join(ln for ln in r.stdout.splitlines() if not ln.startswith("FAILED "))
    assert body.count("onenan: decompress returned 1 non-finite value(s) (NaN/Inf) of ") == 1, r.stdout[-3000:]
    first = failed[0].split("::")[1].split(" ")[0]
    skips = [ln for ln in r.stdout.splitlines() if " SKIPPED " in ln and "::" in ln]
    assert len(skips) >= 10, r.stdout[-3000:]  # the clauses that met the same NaN, each listed
    assert f"skipped, depends on 'decompress returned NaN/Inf' (reported in {first})" in r.stdout
