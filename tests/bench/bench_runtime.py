"""Benchmark: the scripted 3-tool run (tool A, then B, then C, then an answer: 4 model
calls) against one local fake OpenAI-compatible server over real HTTP, through

  (a) a bare httpx loop, and
  (b) agentweb's runtime (Agent + OpenAIChatModel),

in one process, interleaved. Prints medians, p95 and the difference per run.

    .venv/bin/python tests/bench/bench_runtime.py [-n 300] [--json out.json] [--check]

Bar: the runtime within 1.5 ms per run of the bare loop.
"""

from __future__ import annotations

import argparse
import json
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

BAR_MS = 1.5
STEPS = ["tool_a", "tool_b", "tool_c"]


def _scripted_replies() -> list[bytes]:
    bodies = [
        oa_reply(None, [oa_call(f"call_{i}", name, json.dumps({"value": i}))])
        for i, name in enumerate(STEPS)
    ]
    bodies.append(oa_reply("All three tools ran: a, b and c."))
    return [json.dumps(b).encode() for b in bodies]


def start_server() -> FakeLLMServer:
    replies = _scripted_replies()
    server = FakeLLMServer()
    server.record = False

    def respond(req: Recorded) -> Reply:
        done = sum(1 for m in req.json["messages"] if m.get("role") == "tool")
        return Reply(body=replies[min(done, len(replies) - 1)])

    server.responder = respond
    return server


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--runs", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--json", metavar="PATH", help="write a JSON summary here")
    parser.add_argument("--check", action="store_true", help="exit 1 when over the bar")
    args = parser.parse_args(argv)

    server = start_server()
    url = server.openai_url + "/chat/completions"
    client = httpx.Client()
    agent = make_agent(server.openai_url)
    try:
        expected = "All three tools ran: a, b and c."
        assert bare_run(client, url) == expected
        assert runtime_run(agent) == expected, "runtime did not finish the scripted run"
        for _ in range(args.warmup):
            bare_run(client, url)
            runtime_run(agent)
        bare: list[float] = []
        runtime: list[float] = []
        for i in range(args.runs):
            order = (("bare", bare), ("runtime", runtime))
            for kind, sink in order if i % 2 == 0 else order[::-1]:
                t0 = time.perf_counter()
                if kind == "bare":
                    bare_run(client, url)
                else:
                    runtime_run(agent)
                sink.append((time.perf_counter() - t0) * 1000)
    finally:
        client.close()
        agent.model.provider.close()  # type: ignore[attr-defined]
        server.close()

    summary = {
        "runs": args.runs,
        "model_calls_per_run": 4,
        "bare_ms": {"median": statistics.median(bare), "p95": pct(bare, 0.95)},
        "runtime_ms": {"median": statistics.median(runtime), "p95": pct(runtime, 0.95)},
    }
    diff = summary["runtime_ms"]["median"] - summary["bare_ms"]["median"]
    summary["difference_ms"] = {
        "median": diff,
        "p95": summary["runtime_ms"]["p95"] - summary["bare_ms"]["p95"],
    }
    summary["bar_ms"] = BAR_MS
    summary["within_bar"] = diff <= BAR_MS
    b, r, d = summary["bare_ms"], summary["runtime_ms"], summary["difference_ms"]
    print(f"scripted 3-tool run, {args.runs} runs each, 4 model calls per run")
    print(f"  bare httpx loop : median {b['median']:7.3f} ms   p95 {b['p95']:7.3f} ms")
    print(f"  agentweb runtime: median {r['median']:7.3f} ms   p95 {r['p95']:7.3f} ms")
    print(f"  difference      : median {d['median']:+7.3f} ms   p95 {d['p95']:+7.3f} ms per run")
    verdict = "OK" if diff <= BAR_MS else "OVER"
    print(f"  bar             : <= {BAR_MS} ms per run (median difference) -> {verdict}")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
    return 1 if args.check and diff > BAR_MS else 0


if __name__ == "__main__":
    raise SystemExit(main())
