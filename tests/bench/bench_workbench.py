"""What the workbench's isolation costs: run_python in bubblewrap against the same code
in a plain subprocess, the guarded http_get against a bare httpx GET (both to a local
server), and one browse (Chromium start, page, screenshot). Medians and p90, no bars.

    python tests/bench/bench_workbench.py [--runs N]
"""

from __future__ import annotations

import argparse
import functools
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import httpx  # noqa: E402

from tools.workbench import netguard, sandbox  # noqa: E402
from tools.workbench.web import browse  # noqa: E402

CODE = "import csv, io\nrows = list(csv.reader(io.StringIO('a,b\\n1,2\\n')))\nprint(rows)\n"


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def timed(fn: Callable[[], object], runs: int) -> list[float]:
    fn()  # warm-up
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def report(name: str, ms: list[float]) -> float:
    ms = sorted(ms)
    p90 = ms[min(len(ms) - 1, int(len(ms) * 0.9))]
    median = statistics.median(ms)
    print(f"{name:<42} median {median:8.1f} ms   p90 {p90:8.1f} ms   (n={len(ms)})")
    return median


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-workbench-"))
    site = work / "site"
    site.mkdir()
    (site / "page.html").write_text("<title>t</title><h1>Parcel delivered</h1>" + "x" * 20000)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/page.html"
    os.environ["AGENTWEB_HTTP_ALLOW"] = "127.0.0.1"

    if sandbox.unavailable_reason() is None:
        ws = work / "ws"
        ws.mkdir()
        boxed = report("run_python (bubblewrap)", timed(lambda: sandbox.run(CODE, ws), args.runs))
        plain = report(
            "same code, plain subprocess (no isolation)",
            timed(
                lambda: subprocess.run(
                    ["/usr/bin/python3", "-I", "-c", CODE], capture_output=True, check=True
                ),
                args.runs,
            ),
        )
        print(f"{'  isolation overhead':<42} {boxed - plain:+8.1f} ms ({boxed / plain:.2f}x)")
    else:
        print("run_python: skipped,", sandbox.unavailable_reason())

    guarded = report(
        "http_get guard (resolve, check, fetch)", timed(lambda: netguard.fetch(url), args.runs * 5)
    )
    tls = ssl.create_default_context()

    def fresh() -> bytes:  # a new connection each time, as the guard makes
        with httpx.Client(trust_env=False, verify=tls) as one:
            return one.get(url).content

    bare = report("bare httpx GET, new connection", timed(fresh, args.runs * 5))
    with httpx.Client(trust_env=False) as client:
        report(
            "bare httpx GET, kept-alive connection",
            timed(lambda: client.get(url).content, args.runs * 5),
        )
    label = "  guard overhead (vs new connection)"
    print(f"{label:<42} {guarded - bare:+8.1f} ms ({guarded / bare:.2f}x)")

    if os.path.exists("/usr/bin/chromium"):
        report(
            "browse (Chromium, page, screenshot)",
            timed(lambda: browse.fn(url), max(3, args.runs // 4)),
        )
    httpd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
