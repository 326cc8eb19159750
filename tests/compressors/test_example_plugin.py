"""The example plugin package (examples/mpcbench-signsgd) is found through its entry point."""

from __future__ import annotations

import ast
import importlib.metadata
from pathlib import Path

import pytest
import torch

import compressors
from compressors import CompressorError, TensorInfo, TensorRole, build, payload_nbytes

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mpcbench-signsgd"


def _entry_point():
    eps = [ep for ep in importlib.metadata.entry_points(group=compressors.ENTRY_POINT_GROUP) if ep.name == "signsgd"]
    if not eps:
        pytest.skip("example plugin not installed: run `pip install -e examples/mpcbench-signsgd` (CI does)")
    return eps[0]


def test_discovered_through_the_entry_point():
    ep = _entry_point()
    assert ep.value == "mpcbench_signsgd:SignSGD"
    assert "signsgd" in compressors.available()
    assert compressors.get_class("signsgd").__module__ == "mpcbench_signsgd"
    assert "signsgd" not in compressors.plugin_errors()


def test_scaled_sign_roundtrip_and_bit_packing():
    _entry_point()
    c = build("signsgd")
    x = torch.randn(5, 3, 7)  # 105 values -> 14 bytes of signs + a 4-byte scale
    info = TensorInfo(TensorRole.WEIGHT_GRAD, 0, 0, 0, x.shape, x.dtype, x.device)
    payload = c.compress(x, info)
    assert payload[0].dtype == torch.uint8 and payload_nbytes(payload) == 14 + 4
    y = c.decompress(payload, info)
    assert torch.equal(torch.sign(y), torch.sign(x))
    torch.testing.assert_close(y.abs(), torch.full_like(x, float(x.abs().mean())))
    with pytest.raises(CompressorError, match="non-finite"):
        c.compress(torch.full_like(x, float("nan")), info)
    assert build("ef(signsgd)").spec == "ef(signsgd)"  # composes with built-in wrappers


def test_example_imports_only_the_compressors_package():
    tree = ast.parse((EXAMPLE / "mpcbench_signsgd" / "__init__.py").read_text())
    roots = {
        (n.module if isinstance(n, ast.ImportFrom) else a.name).split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in (n.names if isinstance(n, ast.Import) else [n])
    }
    assert roots <= {"__future__", "torch", "compressors"}, roots
    assert 'signsgd = "mpcbench_signsgd:SignSGD"' in (EXAMPLE / "pyproject.toml").read_text()
