"""pytest configuration of the speed benchmarks (``pytest benchmarks``; not part of ``pytest``).

Options (all optional)::

    --bench-shape 8x512x512        CPU input shape (default: 8x512x512 = 2M values)
    --bench-cuda-shape 8x2048x2048 CUDA input shape (default: the issue's 64 MB bf16 activation)
    --bench-device cpu|cuda|all    restrict devices (default: all available)
    --bench-threads 1              torch CPU threads while benchmarking (default 1; 0 = torch's default)
    --bench-clock thread|wall      CPU clock: this thread's CPU time (default) or wall-clock

CPU benchmarks run single-threaded by default: on a shared machine a parallel region waits
for its slowest thread, so with other processes running, 2-thread timings were 5-10x slower
and far noisier than 1-thread ones (measured: x.sum() of 8 MB, 0.55 ms vs 3.9 ms at load 5).
With one thread the CPU clock can be the thread's own CPU time, which excludes the time it
spends descheduled (see ``_harness``). With ``--bench-threads`` other than 1 use
``--bench-clock wall``.

``MPCBENCH_BENCH_ROUNDS`` sets the timed rounds per benchmark (default 7).
Machine facts (torch version, threads, load average, GPU) are added to the JSON's
``machine_info`` so a stored result says what it was measured on.
"""

from __future__ import annotations

import os
import platform

import pytest
import torch
from _harness import parse_shape, use_cpu_clock


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("mpcbench-bench", "mpcbench speed benchmarks")
    g.addoption("--bench-shape", default="8x512x512", help="CPU input shape, e.g. 8x512x512")
    g.addoption("--bench-cuda-shape", default="8x2048x2048", help="CUDA input shape, e.g. 8x2048x2048")
    g.addoption("--bench-device", default="all", choices=["all", "cpu", "cuda"], help="devices to benchmark")
    g.addoption("--bench-threads", default=1, type=int, help="torch CPU threads (default 1; 0 = torch's default)")
    g.addoption(
        "--bench-clock", default="thread", choices=["thread", "wall"], help="CPU clock (default: thread CPU time)"
    )


def devices(config: pytest.Config) -> list[str]:
    want = config.getoption("--bench-device")
    out = []
    if want in ("all", "cpu"):
        out.append("cpu")
    if want in ("all", "cuda") and torch.cuda.is_available():
        out.append("cuda")
    return out


def shape_for(config: pytest.Config, device: str) -> tuple[int, ...]:
    return parse_shape(config.getoption("--bench-cuda-shape" if device == "cuda" else "--bench-shape"))


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory):
    """Stateful compressors (AQ-SGD buffers) write under the cache dir: keep it private."""
    old = os.environ.get("MPCBENCH_CACHE_DIR")
    os.environ["MPCBENCH_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if old is None:
        os.environ.pop("MPCBENCH_CACHE_DIR", None)
    else:
        os.environ["MPCBENCH_CACHE_DIR"] = old


@pytest.fixture(scope="session", autouse=True)
def _threads(pytestconfig: pytest.Config):
    n = pytestconfig.getoption("--bench-threads")
    clock = pytestconfig.getoption("--bench-clock")
    if clock == "thread" and n != 1:
        raise pytest.UsageError("--bench-clock thread measures one thread's CPU time: use it with --bench-threads 1")
    use_cpu_clock(clock)
    old = torch.get_num_threads()
    if n > 0:
        torch.set_num_threads(n)
    yield
    torch.set_num_threads(old)


def _compressors_source() -> str:
    """Where the measured ``compressors`` package was imported from, and a hash of its code
    (the JSON's commit_info names the repository, which need not be the code measured)."""
    import hashlib
    from pathlib import Path

    import compressors

    root = Path(compressors.__file__).parent
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        h.update(f.read_bytes())
    return f"{root} sha256:{h.hexdigest()[:12]}"


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    machine_info["torch"] = torch.__version__
    n = config.getoption("--bench-threads")
    machine_info["torch_threads"] = n if n > 0 else torch.get_num_threads()
    machine_info["cpu_clock"] = config.getoption("--bench-clock")
    machine_info["cpu_count"] = os.cpu_count()
    machine_info["platform"] = platform.platform()
    try:
        machine_info["loadavg_at_start"] = list(os.getloadavg())
    except OSError:
        pass
    machine_info["compressors_source"] = _compressors_source()
    if torch.cuda.is_available():
        machine_info["cuda_device"] = torch.cuda.get_device_name(0)
        machine_info["cuda_version"] = torch.version.cuda


def pytest_benchmark_update_json(config: pytest.Config, benchmarks, output_json: dict) -> None:
    try:
        output_json["machine_info"]["loadavg_at_end"] = list(os.getloadavg())
    except OSError:
        pass
