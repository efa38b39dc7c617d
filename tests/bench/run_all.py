"""`make bench`: every benchmark in turn, each a script of its own; a summary at the end.

Runs under `python -m agentweb.devstack exec`, so DATABASE_URL / REDIS_URL are set.
Figures are medians and percentiles measured here; there are no timed assertions.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

BENCHES = [
    # Tracing is outside the runtime (spans come from stored events), so its figure is the
    # same either way; the stack is measured with tracing off and on (bench_tracing; also
    # `bench_stack.py --otlp` for the whole stack bench with tracing on).
    ("runtime vs bare httpx loop", "bench_runtime.py", []),
    ("whole stack (API → Celery → model → events)", "bench_stack.py", []),
    ("500 runs at once: runs/s, CPU per run per process, approval to action", "bench_burst.py", []),
    ("tracing off and on, side by side", "bench_tracing.py", []),
    ("whole stack, seeded ticket-assistant, streaming", "bench_stack.py", ["--ticket"]),
    ("inside the worker: the seeded run's time by phase", "bench_engine.py", []),
    ("live WebSocket delivery", "bench_live.py", ["--check"]),
    ("tool selection recall", "bench_selection.py", []),
    ("hostile input, resync flood, Redis restart", "bench_hardening.py", []),
    ("delegation: coordinator + 5 children", "bench_delegation.py", []),
    ("experiment of 100 dry cases; a fork against a fresh run", "bench_experiments.py", []),
    ("kill -9 of workers: writes exactly once, recovery time", "bench_crash.py", []),
    ("PostgreSQL connections under 24 polling API clients", "bench_connections.py", []),
    ("observability costs (/metrics scrape, spans per step)", "bench_metrics.py", []),
    ("workbench isolation costs", "bench_workbench.py", []),
    ("approval channels: request -> mail/Slack, Slack click -> tool", "bench_channels.py", []),
    ("ticket intake: signed webhook tickets/s, delivery -> auto-rule run", "bench_intake.py", []),
    ("MCP calls over a local @tool, stdio restarts", "bench_mcp.py", []),
]


def main() -> int:
    failures = []
    for title, script, args in BENCHES:
        path = HERE / script
        if not path.exists():
            print(f"\n== {title}: {script} is not there, skipped")
            continue
        print(f"\n== {title} ({script})", flush=True)
        started = time.monotonic()
        code = subprocess.call([sys.executable, str(path), *args], cwd=ROOT)
        print(f"-- {script}: exit {code} after {time.monotonic() - started:.0f}s", flush=True)
        if code:
            failures.append(script)
    if failures:
        print(f"\nbenchmarks that failed or missed their bar: {', '.join(failures)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
