"""Benchmark: the scripted 3-tool run (tool A, then B, then C, then an answer: 4 model
calls) against one local fake OpenAI-compatible server over real HTTP, through

  (a) a bare httpx loop, and
  (b) agentweb's runtime (Agent + OpenAIChatModel),

in one process, interleaved run by run. The fake server runs in a child process, so the
CPU time measured here (``time.process_time``: this process, every thread, the tool
pool's included) is the client's alone. Prints medians and p95 of CPU and wall time per
run for both, the difference and the ratio, and the machine's load average.

    .venv/bin/python tests/bench/bench_runtime.py [-n 500] [--json out.json] [--check]

Bar (DESIGN §5): the runtime's CPU per run within 1.0 ms and 1.2× of the bare loop's
(medians). ``--check`` exits 1 when the ratio is over 1.2 (the machine-independent part).
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from agentweb.runtime import Agent, AgentConfig, ToolRegistry, tool  # noqa: E402
from agentweb.runtime.openai import OpenAIChatModel  # noqa: E402
from agentweb.runtime.providers import Provider  # noqa: E402
from tests.fakes.llm_server import FakeLLMServer, Recorded, Reply, oa_call, oa_reply  # noqa: E402

BAR_MS = 1.0
BAR_RATIO = 1.2
STEPS = ["tool_a", "tool_b", "tool_c"]
ANSWER = "All three tools ran: a, b and c."


def _scripted_reply(done: int, run: int) -> bytes:
    """The reply to a request that carries ``done`` tool results: the next tool's call,
    or the answer. Call ids are new for every run, as a provider's are: a run's journal
    must not find its calls already done."""
    if done < len(STEPS):
        call = oa_call(f"call_{run}_{done}", STEPS[done], json.dumps({"value": done}))
        return json.dumps(oa_reply(None, [call])).encode()
    return json.dumps(oa_reply(ANSWER)).encode()


def _serve(conn: Any) -> None:
    """The child process: the fake server until the parent says stop."""
    server = FakeLLMServer()
    server.record = False
    runs = itertools.count()
    run = 0

    def respond(req: Recorded) -> Reply:
        nonlocal run
        done = sum(1 for m in req.json["messages"] if m.get("role") == "tool")
        if done == 0:
            run = next(runs)
        return Reply(body=_scripted_reply(done, run))

    server.responder = respond
    conn.send(server.openai_url)
    conn.recv()  # blocks until the parent is done
    server.close()


def start_server() -> tuple[str, Any, Any]:
    """The fake server in a child process: its URL, the process and the pipe to stop it."""
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_serve, args=(child,), daemon=True)
    proc.start()
    return parent.recv(), proc, parent


def tool_a(value: int) -> dict[str, Any]:
    return {"tool": "a", "value": value}


def tool_b(value: int) -> dict[str, Any]:
    return {"tool": "b", "value": value}


def tool_c(value: int) -> dict[str, Any]:
    return {"tool": "c", "value": value}


FUNCS = {"tool_a": tool_a, "tool_b": tool_b, "tool_c": tool_c}
SCHEMA = {"type": "object", "properties": {"value": {"type": "integer"}}, "required": ["value"]}
BARE_TOOLS = [
    {"type": "function", "function": {"name": n, "description": n, "parameters": SCHEMA}}
    for n in STEPS
]


def bare_run(client: httpx.Client, url: str) -> str:
    """The minimum a hand-written loop does: post, parse, run the tool, repeat."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a benchmark."},
        {"role": "user", "content": "Run a, b and c."},
    ]
    while True:
        resp = client.post(
            url,
            json={"model": "bench", "messages": messages, "tools": BARE_TOOLS},
            headers={"Authorization": "Bearer bench"},
        )
        resp.raise_for_status()
        msg = resp.json()["choices"][0]["message"]
        calls = msg.get("tool_calls") or []
        if not calls:
            return str(msg.get("content") or "")
        messages.append(msg)
        for c in calls:
            args = json.loads(c["function"]["arguments"])
            result = FUNCS[c["function"]["name"]](**args)
            messages.append(
                {"role": "tool", "tool_call_id": c["id"], "content": json.dumps(result)}
            )


def make_agent(base_url: str) -> Agent:
    provider = Provider(name="openai", base_url=base_url, api_key="bench")
    model = OpenAIChatModel("bench", provider)
    tools = ToolRegistry(tool(f, description=f.__name__) for f in (tool_a, tool_b, tool_c))
    return Agent(model, tools, AgentConfig(system_prompt="You are a benchmark."))


def runtime_run(agent: Agent) -> str:
    state = agent.start("Run a, b and c.")
    for _ in agent.run(state):
        pass
    return state.final_answer or ""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    idx = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[idx]


def _stats(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "p95": pct(values, 0.95)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("-n", "--runs", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--json", metavar="PATH", help="write a JSON summary here")
    parser.add_argument("--check", action="store_true", help="exit 1 when over the bar")
    args = parser.parse_args(argv)

    base_url, proc, stop = start_server()
    url = base_url + "/chat/completions"
    client = httpx.Client()
    agent = make_agent(base_url)
    wall: dict[str, list[float]] = {"bare": [], "runtime": []}
    cpu: dict[str, list[float]] = {"bare": [], "runtime": []}
    load_before = os.getloadavg()
    try:
        assert bare_run(client, url) == ANSWER
        assert runtime_run(agent) == ANSWER, "runtime did not finish the scripted run"
        for _ in range(args.warmup):
            bare_run(client, url)
            runtime_run(agent)
        for i in range(args.runs):
            order = ("bare", "runtime") if i % 2 == 0 else ("runtime", "bare")
            for kind in order:
                t0, c0 = time.perf_counter(), time.process_time()
                if kind == "bare":
                    bare_run(client, url)
                else:
                    runtime_run(agent)
                cpu[kind].append((time.process_time() - c0) * 1000)
                wall[kind].append((time.perf_counter() - t0) * 1000)
    finally:
        client.close()
        agent.model.provider.close()  # type: ignore[attr-defined]
        stop.send("stop")
        proc.join(5)
    load_after = os.getloadavg()

    summary: dict[str, Any] = {
        "runs": args.runs,
        "model_calls_per_run": 4,
        "cpu_ms": {k: _stats(v) for k, v in cpu.items()},
        "wall_ms": {k: _stats(v) for k, v in wall.items()},
        "load_average": {"before": load_before, "after": load_after},
    }
    c, w = summary["cpu_ms"], summary["wall_ms"]
    cpu_diff = c["runtime"]["median"] - c["bare"]["median"]
    cpu_ratio = c["runtime"]["median"] / c["bare"]["median"]
    summary["cpu_difference_ms"] = cpu_diff
    summary["cpu_ratio"] = cpu_ratio
    summary["wall_difference_ms"] = w["runtime"]["median"] - w["bare"]["median"]
    summary["bar"] = {"cpu_difference_ms": BAR_MS, "cpu_ratio": BAR_RATIO}
    summary["within_bar"] = cpu_diff <= BAR_MS and cpu_ratio <= BAR_RATIO
    print(f"scripted 3-tool run, {args.runs} runs each (interleaved), 4 model calls per run")
    print("  per run            CPU median    CPU p95   wall median   wall p95")
    for kind, label in (("bare", "bare httpx loop "), ("runtime", "agentweb runtime")):
        print(
            f"  {label}  {c[kind]['median']:8.3f} ms {c[kind]['p95']:8.3f} ms"
            f"  {w[kind]['median']:8.3f} ms {w[kind]['p95']:8.3f} ms"
        )
    print(
        f"  difference        {cpu_diff:+8.3f} ms (CPU, {cpu_ratio:.2f}x)"
        f"   {summary['wall_difference_ms']:+8.3f} ms (wall)"
    )
    ok = "OK" if summary["within_bar"] else "OVER"
    print(f"  bar               CPU <= bare + {BAR_MS} ms and <= {BAR_RATIO}x -> {ok}")
    loads = " ".join(f"{x:.2f}" for x in load_before)
    loads += ", after " + " ".join(f"{x:.2f}" for x in load_after)
    print(f"  load average      before {loads}")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
    return 1 if args.check and cpu_ratio > BAR_RATIO else 0


if __name__ == "__main__":
    raise SystemExit(main())
