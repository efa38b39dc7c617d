"""A run paused for approval in one process is resumed exactly in another."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FIRST = """
import json
from agentweb.runtime import Agent, AgentConfig, load_tools
from agentweb.runtime.testing import ScriptedModel, call
tools = load_tools(["tests.runtime.sample_tools.shop"])
turn = [call("lookup", order_id="A1"), call("refund_money", order_id="A1", amount=9)]
model = ScriptedModel([turn])
agent = Agent(model, tools, AgentConfig(system_prompt="sys"))
state = agent.start("refund A1")
run = agent.run(state)
events = [e.type for e in run]
print(json.dumps({"events": events, "state": state.to_json(),
                  "pending": [p.model_dump() for p in run.outcome.calls]}))
"""

SECOND = """
import json, sys
from agentweb.runtime import Agent, AgentConfig, Decision, LoopState, load_tools
from agentweb.runtime.testing import ScriptedModel
data = json.loads(sys.stdin.read())
tools = load_tools(["tests.runtime.sample_tools.shop"])
model = ScriptedModel(["Refunded 9 on A1."])
agent = Agent(model, tools, AgentConfig(system_prompt="sys"))
state = LoopState.from_json(data["state"])
assert state.to_json() == data["state"]
agent.decide(state, [Decision(call_id=data["pending"][0]["call_id"], approved=True)])
run = agent.run(state)
events = [(e.type, e.data.get("result")) for e in run]
seen = [m.role for m in model.requests[0].messages]
print(json.dumps({"events": events, "answer": run.outcome.answer, "seen": seen}))
"""


def _python(code: str, stdin: str = "") -> dict:
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_it_resumes_in_a_different_process():
    first = _python(FIRST)
    assert first["events"][-1] == "approval_requested"
    assert first["pending"][0]["tool"] == "refund_money"
    second = _python(SECOND, json.dumps(first))
    assert second["events"] == [
        ["tool_call_started", None],
        ["tool_call_finished", "A1:9.0"],
        ["model_called", None],
        ["run_finished", None],
    ]
    assert second["answer"] == "Refunded 9 on A1."
    assert second["seen"] == ["system", "user", "assistant", "tool", "tool"]
