"""Benchmark of the approval channels (DESIGN §12) through the whole stack: Daphne, a
Celery worker and beat, a fake model at zero latency, aiosmtpd for mail and a receiver
playing Slack.

1. Request → notification delivered: from the stored ``approval_requested`` event to the
   moment the SMTP server has the mail, and Slack's incoming webhook the message (each
   run asks for one high-risk call; the two approvers and the admin are mailed). Runs one
   at a time, then a burst of runs started at once. Floor, measured in the same run: one
   mail of the same size sent straight to the same server with smtplib, and one POST of
   the same Slack body with httpx.
2. Slack click → the tool's ``tool_call_started``: a signed interaction callback posted to
   ``/hooks/slack/interactions``, to the stored ``tool_call_started`` of the approved
   call; beside it the same for ``POST /api/approvals/{id}/decide`` (the floor: the same
   decision without Slack), rounds taken in turn.

    python -m agentweb.devstack exec -- .venv/bin/python tests/bench/bench_channels.py

Uses a database of its own (the DATABASE_URL's name + "_bench_channels"). Prints p50 and
p95; no bars are asserted here (DESIGN §5's "decision to tool_call_started p95 <= 100 ms"
is reported beside them).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import smtplib
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psycopg  # noqa: E402

from tests.bench.stack_setup import seeded_django, stack_env, tokens  # noqa: E402
from tests.fakes.llm_server import FakeLLMServer, Recorded, Reply, oa_call, oa_reply  # noqa: E402
from tests.fakes.receiver import Receiver  # noqa: E402
from tests.fakes.slack import block_actions, button, signed  # noqa: E402
from tests.fakes.smtp_server import FakeSmtpServer  # noqa: E402

SLACK_SECRET = "bench-slack-secret"
MAILS = 2  # per request: the demo's approver and admin (the operator starts the runs)
INCOMING = "/services/TBENCH/BBENCH/incoming"
LINK = re.compile(r"/approvals/(\d+)/\?t=")


def responder(req: Recorded) -> Reply:
    """Pay out on the order named in the task (high risk: a person decides), then answer."""
    messages = req.json["messages"]
    task = next(m for m in messages if m["role"] == "user")["content"]
    if not any(m["role"] == "tool" for m in messages):
        order = task.split()[-1]
        return Reply(
            json=oa_reply(tool_calls=[oa_call("p-1", "pay_out", {"order_id": order, "amount": 5})])
        )
    return Reply(json=oa_reply(content="Paid."))


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def line(name: str, values: list[float]) -> dict[str, float]:
    p50, p95 = statistics.median(values), pct(values, 0.95)
    print(f"  {name:<46} p50 {p50:7.1f} ms   p95 {p95:7.1f} ms   (n={len(values)})")
    return {"p50_ms": round(p50, 1), "p95_ms": round(p95, 1), "n": len(values)}


class Bench:
    def __init__(self, url: str, conn: Any, smtp: FakeSmtpServer, slack: Receiver, token: str):
        self.url, self.conn, self.smtp, self.slack = url, conn, smtp, slack
        self.api = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )
        self.n = 0
        self.seen: list[tuple[int, float]] = []  # (approval id, when it arrived) per mail

    def start(self) -> int:
        self.n += 1
        answer = self.api.post(
            "/api/runs", json={"task": f"Pay back B{self.n}", "agent": "bench-pay"}
        )
        assert answer.status_code == 201, answer.text
        return int(answer.json()["id"])

    def poll(self, sql: str, args: tuple[Any, ...], timeout: float = 60) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            row = self.conn.execute(sql, args).fetchone()
            if row is not None and row[0] is not None:
                return row
            time.sleep(0.005)
        raise SystemExit(f"timed out: {sql} {args}")

    def requested(self, run_id: int) -> tuple[int, float]:
        """(approval id, when its approval_requested event was stored: unix seconds)."""
        row = self.poll(
            "SELECT extract(epoch FROM e.at), a.id FROM runs_runevent e JOIN runs_approval a "
            "ON a.run_id = e.run_id WHERE e.run_id=%s AND e.type='approval_requested'",
            (run_id,),
        )
        return int(row[1]), float(row[0])

    def mailed_at(self, approval_id: int, count: int, timeout: float = 60) -> list[float]:
        """When the SMTP server had each of the approval's mails (each mail read once:
        the server's thread shares this process)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            messages = list(self.smtp.messages)
            for got in messages[len(self.seen) :]:
                found = LINK.search(got.text())
                self.seen.append((int(found.group(1)) if found else 0, got.wall))
            walls = [wall for pk, wall in self.seen if pk == approval_id]
            if len(walls) >= count:
                return walls
            time.sleep(0.005)
        raise SystemExit(f"approval {approval_id}: {count} mails did not arrive")

    def stages(self, approval_id: int, asked: float) -> list[tuple[float, float]]:
        """Per delivery: (stored -> queued, queued -> sent) in ms, from the outbox's rows."""
        rows = self.conn.execute(
            "SELECT extract(epoch FROM created_at), extract(epoch FROM sent_at) FROM "
            "outbox_delivery WHERE about_type='approval' AND about_id=%s AND channel='email'",
            (approval_id,),
        ).fetchall()
        return [((float(c) - asked) * 1000, (float(t) - float(c)) * 1000) for c, t in rows if t]

    def slacked(self, approval_id: int, timeout: float = 60) -> Any:
        wanted = f'"approval": {approval_id}'
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for hit in list(self.slack.accepted):
                if hit.path == INCOMING and wanted in str(hit.json):  # the buttons' value
                    return hit
            time.sleep(0.005)
        raise SystemExit(f"approval {approval_id}: no Slack message")

    def tool_started(self, run_id: int) -> float:
        row = self.poll(
            "SELECT extract(epoch FROM at) FROM runs_runevent WHERE run_id=%s AND "
            "type='tool_call_started' AND data->>'tool'='pay_out'",
            (run_id,),
        )
        return float(row[0])

    def finished(self, run_id: int) -> None:
        self.poll(
            "SELECT status FROM runs_run WHERE id=%s AND status IN ('succeeded','failed')",
            (run_id,),
        )


def floors(
    smtp: FakeSmtpServer, slack: Receiver, mail: bytes, body: bytes, rounds: int
) -> tuple[list[float], list[float]]:
    mails, posts = [], []
    with httpx.Client(timeout=10) as client:
        for _ in range(rounds):
            started = time.time()
            with smtplib.SMTP("127.0.0.1", smtp.port, timeout=10) as s:
                s.sendmail("floor@example.test", ["floor@example.test"], mail)
            mails.append((time.time() - started) * 1000)
            started = time.time()
            client.post(
                slack.url("/floor"), content=body, headers={"Content-Type": "application/json"}
            )
            posts.append((time.time() - started) * 1000)
    return mails, posts


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30, help="runs one at a time")
    parser.add_argument("--burst", type=int, default=20, help="runs started at once")
    parser.add_argument("--threads", type=int, default=8, help="worker threads")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()

    smtp = FakeSmtpServer()
    slack = Receiver()
    llm = FakeLLMServer()
    llm.record = False
    llm.responder = responder
    env = stack_env(
        "_bench_channels",
        OPENAI_BASE_URL=llm.openai_url,
        AGENTWEB_SMTP_URL=smtp.url,
        AGENTWEB_MAIL_FROM="Approvals <approvals@example.test>",
        AGENTWEB_SITE_URL="http://agentweb.bench",
        AGENTWEB_SLACK_WEBHOOK_URL=slack.url(INCOMING),
        AGENTWEB_SLACK_SIGNING_SECRET=SLACK_SECRET,
        AGENTWEB_SLACK_USERS="UBENCHAPPROVER=approver",
    )
    seeded_django()
    from agentweb.runs.models import AgentProfile

    AgentProfile.objects.create(name="bench-pay", system_prompt="You pay customers back.")
    [token] = tokens("operator")
    from tests.conftest import start_beat, start_web, start_worker

    tmp = Path(tempfile.mkdtemp(prefix="agentweb-bench-channels-"))
    procs = []
    results: dict[str, Any] = {"worker_threads": args.threads}
    try:
        web, url = start_web(env, tmp)
        procs += [web, start_worker(env, tmp, "bench-channels", args.threads), start_beat(env, tmp)]
        conn = psycopg.connect(env["DATABASE_URL"], autocommit=True)
        bench = Bench(url, conn, smtp, slack, token)

        # 1. request -> delivered, one run at a time (the first is a warm-up)
        mail_ms, slack_ms, approvals, queued_ms, sending_ms = [], [], [], [], []
        for i in range(args.rounds + 1):
            run_id = bench.start()
            approval_id, asked = bench.requested(run_id)
            mails = bench.mailed_at(approval_id, MAILS)
            hit = bench.slacked(approval_id)
            if i:
                mail_ms += [(at - asked) * 1000 for at in mails]
                slack_ms.append((hit.wall - asked) * 1000)
                for queued, sending in bench.stages(approval_id, asked):
                    queued_ms.append(queued)
                    sending_ms.append(sending)
            approvals.append((run_id, approval_id, hit.json))
        # ... and a burst of runs started at once
        with ThreadPoolExecutor(max_workers=args.burst) as pool:
            burst_runs = list(pool.map(lambda _: bench.start(), range(args.burst)))
        burst_mail, burst_slack = [], []
        for run_id in burst_runs:
            approval_id, asked = bench.requested(run_id)
            burst_mail += [(at - asked) * 1000 for at in bench.mailed_at(approval_id, MAILS)]
            hit = bench.slacked(approval_id)
            burst_slack.append((hit.wall - asked) * 1000)
            approvals.append((run_id, approval_id, hit.json))
        sample_mail = smtp.messages[-1].data
        sample_post = json.dumps(approvals[-1][2]).encode()
        mail_floor, post_floor = floors(smtp, slack, sample_mail, sample_post, args.rounds)

        # 2. a click -> tool_call_started, Slack and the API in turn
        slack_click, api_click = [], []
        approver_api = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {tokens('approver')[0]}"}, timeout=30
        )
        for n, (run_id, approval_id, message) in enumerate(approvals):
            started = time.time()
            if n % 2 == 0:
                payload = block_actions(
                    user_id="UBENCHAPPROVER",
                    action_id="agentweb_approve",
                    value=button(message, "agentweb_approve")["value"],
                    response_url=slack.url(f"/respond/{approval_id}"),
                    message=message,
                )
                body, headers = signed(SLACK_SECRET, payload)
                answer = httpx.post(
                    f"{url}/hooks/slack/interactions", content=body, headers=headers, timeout=30
                )
                assert answer.status_code == 200, answer.text
                slack_click.append((bench.tool_started(run_id) - started) * 1000)
            else:
                answer = approver_api.post(
                    f"/api/approvals/{approval_id}/decide", json={"decision": "approve"}
                )
                assert answer.status_code == 200, answer.text
                api_click.append((bench.tool_started(run_id) - started) * 1000)
            bench.finished(run_id)
        replaced = [h for h in slack.accepted if h.path.startswith("/respond/")]

        load = os.getloadavg()[0]
        results["load_average_1m"] = round(load, 2)
        print(
            f"approval channels, {args.threads} worker threads, zero model latency "
            f"(load average {load:.1f} on {os.cpu_count()} cores):"
        )
        print(" request stored -> notification delivered")
        results["mail_one_at_a_time"] = line(
            f"mail ({MAILS} per request), one run at a time", mail_ms
        )
        results["mail_stored_to_queued"] = line("  of it: event stored -> mail queued", queued_ms)
        results["mail_queued_to_sent"] = line("  of it: mail queued -> sent", sending_ms)
        results["slack_one_at_a_time"] = line("Slack message, one run at a time", slack_ms)
        results[f"mail_burst_{args.burst}"] = line(
            f"mail, {args.burst} runs started at once", burst_mail
        )
        results[f"slack_burst_{args.burst}"] = line(
            f"Slack message, {args.burst} runs at once", burst_slack
        )
        results["floor_smtplib_send"] = line("floor: smtplib send to the same server", mail_floor)
        results["floor_httpx_post"] = line("floor: httpx POST to the same receiver", post_floor)
        print(" decision -> the tool's tool_call_started")
        results["slack_click_to_tool_call_started"] = line(
            "Slack click (signed callback)", slack_click
        )
        results["api_decide_to_tool_call_started"] = line("API decide (floor)", api_click)
        ratio = statistics.median(slack_click) / statistics.median(api_click)
        print(
            f"  Slack click / API decide, p50: {ratio:.2f}x; "
            f"message replaced in Slack: {len(replaced)}/{len(slack_click)}"
        )
        results["slack_over_api_p50"] = round(ratio, 2)
        results["slack_messages_replaced"] = len(replaced)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2))
        return 0
    finally:
        for proc in reversed(procs):
            proc.stop()
        smtp.close()
        slack.close()
        llm.close()


if __name__ == "__main__":
    sys.exit(main())
