"""Serve the leaderboard and capture it in headless Chromium: ``python -m leaderboard.screenshot OUT.png``.

    python -m leaderboard.screenshot docs/leaderboard.png                 # default sources
    python -m leaderboard.screenshot out.png --records records --results results/store.jsonl
    python -m leaderboard.screenshot out.png --task sst2 --rule time_to_target --network 300Mbps/2ms
    python -m leaderboard.screenshot out.png --entry my-entry             # that entry's rows and card

``--task``, ``--tier``, ``--rule``, ``--network`` (a profile name, or ``BANDWIDTH/LATENCY`` such
as ``300Mbps/2ms`` for the sliders) and ``--entry`` (an entry folder name) become the page's
URL parameters, so the screenshot shows exactly the view a reader gets from that link.

Chromium's ``--dump-dom`` / ``--screenshot`` flags return at the page's load event, before a
Streamlit page has received its content over the websocket, so this drives Chromium over the
DevTools protocol instead (with the ``websockets`` package Streamlit already depends on): it
navigates, waits until the page shows the expected text and the script has finished, then
sizes the viewport to the page and captures it. The browser test uses the same functions.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterator, Sequence

__all__ = [
    "find_chromium",
    "free_port",
    "serve",
    "Browser",
    "ranking_rows_on_screen",
    "RANKING_ROWS_JS",
    "RANKING_LINE_JS",
    "RANKING_FRESH_JS",
    "view_query",
    "capture",
    "main",
]

APP = Path(__file__).resolve().with_name("app.py")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--mute-audio",
]
# the page is done when the script has run (no "Running..." status widget) and no skeletons remain
_DONE_JS = (
    "(() => !document.querySelector('[data-testid=stStatusWidget]')"
    " && !document.querySelector('[data-testid=stSkeleton]')"
    " && !!document.querySelector('[data-testid=stMainBlockContainer]'))()"
)


def find_chromium() -> str | None:
    """``$MPCBENCH_CHROMIUM`` or the first of chromium / chromium-browser / google-chrome on PATH."""
    env = os.environ.get("MPCBENCH_CHROMIUM")
    if env:
        return env if shutil.which(env) else None
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen, grace: float = 3.0) -> None:
    """Terminate the process group we started for ``proc`` (SIGTERM, then SIGKILL after ``grace`` s)."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace)
    except (ProcessLookupError, PermissionError):
        pass
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


@contextlib.contextmanager
def serve(
    app_args: Sequence[str] = (), *, port: int | None = None, timeout: float = 60.0, env: dict | None = None
) -> Iterator[str]:
    """Run ``streamlit run leaderboard/app.py -- *app_args`` headless; yield its URL; stop it after."""
    port = port or free_port()
    cmd = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(APP),
        "--server.headless",
        "true",
        "--server.port",
        str(port),
        "--server.address",
        "127.0.0.1",
        "--browser.gatherUsageStats",
        "false",
        "--server.fileWatcherType",
        "none",
        "--client.toolbarMode",
        "viewer",
        "--",
        *app_args,
    ]
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"streamlit exited with {proc.returncode}: {log.read().decode()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"streamlit did not answer on {url} within {timeout:.0f}s")
            time.sleep(0.2)
        yield url
    finally:
        _stop(proc)
        log.close()


class Browser:
    """Headless Chromium driven over the DevTools protocol (one page)."""

    def __init__(self, chromium: str | None = None, *, width: int = 1400, height: int = 1000, timeout: float = 30.0):
        from websockets.sync.client import connect  # Streamlit's own dependency

        self.chromium = chromium or find_chromium()
        if not self.chromium:
            raise FileNotFoundError(
                "chromium not found: install it (apt-get install -y chromium) or set MPCBENCH_CHROMIUM"
            )
        self.profile = tempfile.mkdtemp(prefix="mpcbench-chromium-")
        self.proc = subprocess.Popen(
            [
                self.chromium,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={self.profile}",
                "--remote-debugging-port=0",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._id = 0
        self._stack = contextlib.ExitStack()
        try:
            port = self._devtools_port(timeout)
            page = self._page_ws(port, timeout)
            self.ws = self._stack.enter_context(connect(page, max_size=None, open_timeout=timeout))
            self.size(width, height)
        except BaseException:
            self.close()
            raise

    def _devtools_port(self, timeout: float) -> int:
        marker = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode} before opening DevTools")
            if marker.exists():
                lines = marker.read_text().split()
                if lines:
                    return int(lines[0])
            time.sleep(0.1)
        raise TimeoutError("chromium did not open its DevTools port")

    @staticmethod
    def _page_ws(port: int, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as r:
                    pages = [t for t in json.load(r) if t.get("type") == "page"]
                if pages:
                    return pages[0]["webSocketDebuggerUrl"]
            time.sleep(0.1)
        raise TimeoutError("chromium has no page target")

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; returns its result (events arriving meanwhile are dropped)."""
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def eval(self, expression: str) -> Any:
        res = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"page script failed: {res['exceptionDetails'].get('text')}")
        return res.get("result", {}).get("value")

    def size(self, width: int, height: int) -> None:
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def goto(self, url: str) -> None:
        self.send("Page.enable")
        self.send("Page.navigate", url=url)

    def wait_for(self, texts: list[str], *, timeout: float = 45.0, settle: float = 1.0) -> str:
        """Wait until the page's visible text contains every string in ``texts`` and the app has
        finished running; return the visible text."""
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.eval("document.body ? document.body.innerText : ''") or ""
            if all(t in text for t in texts) and self.eval(_DONE_JS):
                time.sleep(settle)  # charts draw after the script finishes
                return self.eval("document.body.innerText") or text
            time.sleep(0.3)
        missing = [t for t in texts if t not in text]
        raise TimeoutError(f"page did not show {missing} within {timeout:.0f}s; it shows: {text[:500]!r}")

    def wait_js(self, expression: str, *, timeout: float = 30.0) -> Any:
        """Poll a page expression until it is truthy; return its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.eval(expression)
            if value or time.monotonic() > deadline:
                if not value:
                    raise TimeoutError(f"page never satisfied {expression!r} within {timeout:.0f}s")
                return value
            time.sleep(0.3)

    def click(self, x: float, y: float) -> None:
        """A left click at page coordinates (CSS pixels), as a user's mouse does it."""
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def select(self, label: str, option: str) -> None:
        """Pick ``option`` in the Streamlit selectbox labelled ``label``: click it, type, Enter."""
        box = self.eval(
            "(() => { const s = [...document.querySelectorAll('[data-testid=stSelectbox]')]"
            f".find(e => e.innerText.trim().startsWith({json.dumps(label)}));"
            " if (!s) return null; const r = s.querySelector('input, [role=combobox]').getBoundingClientRect();"
            " return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        if not box:
            raise LookupError(f"no selectbox labelled {label!r} on the page")
        self.click(*box)
        self.send("Input.insertText", text=option)
        for kind in ("keyDown", "keyUp"):
            self.send("Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter", windowsVirtualKeyCode=13)

    def running(self) -> bool:
        """Whether the app's script is running, the page still draws its skeleton, or an element of the
        previous run is still on it (``data-stale``: the status widget shows only after a delay)."""
        return not self.eval(_DONE_JS) or bool(self.eval("!!document.querySelector('[data-stale=true]')"))

    def screenshot(self, path: str | Path, *, width: int | None = None, full_page: bool = True) -> Path:
        """PNG of the page; with ``full_page`` the viewport first grows to the app's content height."""
        if full_page:
            h = self.eval(
                "Math.max(...[...document.querySelectorAll('[data-testid=stMain], [data-testid=stAppViewContainer],"
                " [data-testid=stMainBlockContainer], [data-testid=stSidebar]')].map(e => e.scrollHeight), 600)"
            )
            w = width or self.eval("window.innerWidth")
            self.size(int(w), int(min(h + 40, 12000)))
            time.sleep(1.0)  # relayout; vega charts resize to the new width
        data = self.send("Page.captureScreenshot", format="png")["data"]
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._stack.close()
        _stop(self.proc)
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# the ranking grid (the page's first table): its top edge, its row count (accessible table) and its text
RANKING_GRID_JS = "[...document.querySelectorAll('[data-testid=stDataFrame]')][0]"
# the ranking grid is this run's, not the previous run's waiting to be replaced
RANKING_FRESH_JS = (
    f"(() => {{ const g = {RANKING_GRID_JS}; const c = g && g.closest('[data-testid=stElementContainer]');"
    " return !!g && !(c && c.getAttribute('data-stale') === 'true'); })()"
)
RANKING_ROWS_JS = (
    f"(() => {{ const g = {RANKING_GRID_JS}; return g ? g.querySelectorAll('[role=row]').length - 1 : 0; }})()"
)
# the line under the ranking's question (task / tier / setup, metric, network): it changes with every filter
RANKING_LINE_JS = "(() => { const t = document.querySelector('[data-testid=stMain] [data-testid=stText]'); return t ? t.innerText : ''; })()"
GRID_ROW_PX, GRID_HEADER_PX = 35, 38  # the grid's fixed row and header heights (leaderboard/app.py's _table_height)


def ranking_rows_on_screen(b: Browser) -> int:
    """How many rows of the ranking grid lie wholly inside the viewport as it is scrolled now."""
    top = float(b.eval(f"(() => {{ const g = {RANKING_GRID_JS}; return g ? g.getBoundingClientRect().top : 1e9; }})()"))
    rows, height = int(b.eval(RANKING_ROWS_JS) or 0), float(b.eval("window.innerHeight"))
    return max(0, min(rows, int((height - top - GRID_HEADER_PX) // GRID_ROW_PX)))


_LATENCY_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def view_query(
    task: str | None = None,
    tier: str | None = None,
    rule: str | None = None,
    network: str | None = None,
    entry: str | None = None,
) -> dict[str, str]:
    """The page's URL parameters for a view (see the module docstring); bad values raise ValueError."""
    q: dict[str, str] = {k: v for k, v in (("task", task), ("tier", tier), ("rule", rule), ("entry", entry)) if v}
    if network:
        if "/" in network:
            bw_text, lat_text = network.split("/", 1)
            from leaderboard.networks import profile_bandwidth_bps

            bw = profile_bandwidth_bps(bw_text)
            unit = next((u for u in sorted(_LATENCY_UNITS, key=len, reverse=True) if lat_text.endswith(u)), None)
            try:
                lat = float(lat_text[: -len(unit)]) * _LATENCY_UNITS[unit] if unit else float("nan")
            except ValueError:
                lat = float("nan")
            if not (bw > 0) or not (lat >= 0):
                raise ValueError(f"--network {network!r}: give a profile name or BANDWIDTH/LATENCY, e.g. 300Mbps/2ms")
            q.update(network="custom", bw=repr(bw), lat=repr(lat))
        else:
            q["network"] = network
    return q


def capture(
    app_args: list[str],
    out: str | Path,
    *,
    wait_for: Sequence[str] = ("Ranking",),
    width: int = 1800,
    timeout: float = 60.0,
    query: dict[str, str] | None = None,
    height: int | None = None,
) -> str:
    """Serve the app with ``app_args``, load it (with ``query`` as URL parameters), wait for
    ``wait_for``, save a PNG to ``out`` (the whole page, or the first ``height`` pixels as a
    ``width`` x ``height`` screen shows them); return the page's visible text."""
    from urllib.parse import urlencode

    with serve(list(app_args), timeout=timeout) as url, Browser(width=width, height=height or 1000) as b:
        b.goto(url + ("/?" + urlencode(query) if query else ""))
        text = b.wait_for(list(wait_for), timeout=timeout)
        b.screenshot(out, width=width, full_page=height is None)
        return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m leaderboard.screenshot", description=__doc__.split("\n")[0])
    p.add_argument("out", help="PNG file to write")
    p.add_argument("--results", action="append", default=[], help="results store (repeatable)")
    p.add_argument("--records", action="append", default=[], help="records folder (repeatable)")
    p.add_argument("--task", help="task to show (default: the first)")
    p.add_argument("--tier", help="tier to show (default: quick)")
    p.add_argument("--rule", help="ranking rule: quality_at_ratio, time_to_target or pareto")
    p.add_argument("--network", help="network profile name, or BANDWIDTH/LATENCY for the sliders (e.g. 300Mbps/2ms)")
    p.add_argument("--entry", help="entry folder name: its task, tier and setup, its rows highlighted, its card open")
    p.add_argument("--width", type=int, default=1800)
    p.add_argument(
        "--height", type=int, default=None, help="only what a screen this tall shows (default: the whole page)"
    )
    p.add_argument("--timeout", type=float, default=90.0)
    a = p.parse_args(argv)
    app_args = [x for r in a.results for x in ("--results", r)] + [x for r in a.records for x in ("--records", r)]
    try:
        query = view_query(a.task, a.tier, a.rule, a.network, a.entry)
    except ValueError as e:
        p.error(str(e))
    try:
        capture(app_args, a.out, width=a.width, timeout=a.timeout, query=query, height=a.height)
    except (OSError, RuntimeError, TimeoutError) as e:
        print(f"screenshot failed: {e}", file=sys.stderr)
        return 1
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
