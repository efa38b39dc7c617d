"""The channels end to end, with real processes: Daphne, a Celery worker and beat, a model
over HTTP, aiosmtpd for mail and a receiver playing Slack. Ten decisions arrive at the
same moment by Slack, by mailed links and from the web inbox: one decision, one refund.
A Slack that is down holds up nobody: the mail goes out, the link decides."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from agentweb.runs.models import Approval, Run, RunEvent, ToolExecution
from tests.conftest import Proc, start_beat, start_web, start_worker, wait_for
from tests.fakes.llm_server import FakeLLMServer
from tests.fakes.receiver import Receiver
from tests.fakes.slack import block_actions, button, signed
from tests.fakes.smtp_server import FakeSmtpServer
from tests.runs.test_e2e import refund_script, refundable_order, token

pytestmark = pytest.mark.e2e

SLACK_SECRET = "e2e-slack-signing-secret"
PASSWORD = "channels-pass-123"
SLACKERS = {f"USLACK{i}": f"slacker{i}" for i in range(4)}  # decide by Slack
MAILERS = [f"mailer{i}" for i in range(3)]  # decide by their mailed link
INBOXERS = [f"inboxer{i}" for i in range(3)]  # decide in the web inbox
LINK = re.compile(r"https?://[^/\s]+(/approvals/\d+/\?t=[A-Za-z0-9_-]+)")


@pytest.fixture(scope="module")
def peers() -> Iterator[dict[str, Any]]:
    with FakeLLMServer() as llm, FakeSmtpServer() as smtp, Receiver() as slack:
        yield {"llm": llm, "smtp": smtp, "slack": slack}


@pytest.fixture(scope="module")
def stack(
    stack_env: dict[str, str], peers: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    env = {
        **stack_env,
        "AGENTWEB_MODEL": "openai:fake-model",
        "OPENAI_BASE_URL": peers["llm"].openai_url,
        "OPENAI_API_KEY": "test-key",
        "AGENTWEB_STREAM": "0",
        "AGENTWEB_QUEUE": f"channels-e2e-{os.getpid()}",
        "AGENTWEB_SMTP_URL": peers["smtp"].url,
        "AGENTWEB_MAIL_FROM": "Approvals <approvals@example.test>",
        "AGENTWEB_SITE_URL": "http://agentweb.example.test",
        "AGENTWEB_SLACK_WEBHOOK_URL": peers["slack"].url("/services/T1/B1/incoming"),
        "AGENTWEB_SLACK_SIGNING_SECRET": SLACK_SECRET,
        "AGENTWEB_SLACK_USERS": ",".join(f"{k}={v}" for k, v in SLACKERS.items()),
        "AGENTWEB_DELIVERY_TIMEOUT_SECONDS": "2",
    }
    tmp = tmp_path_factory.mktemp("channels")
    web, url = start_web(env, tmp)
    procs: list[Proc] = [web, start_worker(env, tmp, "channels-worker"), start_beat(env, tmp)]
    yield {"url": url, "env": env}
    for proc in procs:
        proc.stop()


@pytest.fixture
def people(demo: dict[str, Any]) -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    approvers = Group.objects.get(name="approver")
    made = {}
    for name in [*SLACKERS.values(), *MAILERS, *INBOXERS]:
        user = get_user_model().objects.create_user(
            name, email=f"{name}@example.test", password=PASSWORD
        )
        user.groups.add(approvers)
        made[name] = user
    return made


def session(url: str, username: str) -> httpx.Client:
    """A browser's session: the login form, then the CSRF cookie for posts."""
    client = httpx.Client(base_url=url, timeout=30, follow_redirects=False)
    client.get("/accounts/login/")
    answer = client.post(
        "/accounts/login/",
        data={
            "username": username,
            "password": PASSWORD,
            "csrfmiddlewaretoken": client.cookies["csrftoken"],
        },
    )
    assert answer.status_code == 302, answer.text[:300]
    return client


def start_refund(url: str, peers: dict[str, Any], amount: float = 35.0) -> tuple[int, Any]:
    peers["llm"].responder = refund_script(amount, [])  # 35 needs a person
    order = refundable_order()
    client = httpx.Client(base_url=url, headers=token("operator"), timeout=10)
    run_id = client.post("/api/runs", json={"task": f"Refund on {order.number}"}).json()["id"]
    wait_for(lambda: Run.objects.filter(pk=run_id, status="waiting_approval").exists(), 30)
    return run_id, order


def link_of(smtp: FakeSmtpServer, username: str, approval_id: int) -> str | None:
    for got in smtp.to(f"{username}@example.test"):
        found = LINK.search(got.text())
        if found and f"/approvals/{approval_id}/" in found.group(1):
            return found.group(1)
    return None


def test_ten_decisions_at_once_by_slack_mail_and_inbox_make_one(
    stack: dict[str, Any], peers: dict[str, Any], people: dict[str, Any]
) -> None:
    from agentweb.shop.models import Refund

    smtp, slack, url = peers["smtp"], peers["slack"], stack["url"]
    run_id, order = start_refund(url, peers)
    approval = Approval.objects.get(run_id=run_id)
    # every approver is mailed (not the operator who started it), and Slack is posted to
    mailed = {f"{n}@example.test" for n in [*SLACKERS.values(), *MAILERS, *INBOXERS]}
    wait_for(lambda: mailed <= {m.envelope_to[0] for m in smtp.messages}, 30)
    assert not smtp.to("operator@example.com")
    posted = wait_for(
        lambda: [h for h in slack.accepted if h.path == "/services/T1/B1/incoming"], 30
    )
    message = posted[-1].json
    assert f'"approval": {approval.pk}' in button(message, "agentweb_approve")["value"]

    # each decider ready: Slack clicks signed, mail links opened, inbox pages open
    attempts: list[tuple[str, Any]] = []
    for slack_id in SLACKERS:
        payload = block_actions(
            user_id=slack_id,
            action_id="agentweb_approve",
            value=button(message, "agentweb_approve")["value"],
            response_url=slack.url(f"/respond/{slack_id}"),
            message=message,
        )
        attempts.append(("slack", signed(SLACK_SECRET, payload)))
    for name in MAILERS:
        client = session(url, name)
        path = link_of(smtp, name, approval.pk)
        assert path is not None and client.get(path).status_code == 200  # decides nothing
        attempts.append(("link", (client, path)))
    for name in INBOXERS:
        client = session(url, name)
        assert client.get("/approvals/").status_code == 200
        attempts.append(("inbox", client))
    assert Approval.objects.get(pk=approval.pk).status == "pending"
    assert len(attempts) == 10

    go = threading.Barrier(len(attempts))

    def decide(attempt: tuple[str, Any]) -> tuple[str, int]:
        kind, what = attempt
        go.wait(timeout=30)
        if kind == "slack":
            body, headers = what
            answer = httpx.post(
                f"{url}/hooks/slack/interactions", content=body, headers=headers, timeout=30
            )
        elif kind == "link":
            client, path = what
            answer = client.post(
                path,
                data={"decision": "approve", "csrfmiddlewaretoken": client.cookies["csrftoken"]},
            )
        else:
            client = what
            answer = client.post(
                f"/approvals/{approval.pk}/decide/",
                data={"decision": "approve", "csrfmiddlewaretoken": client.cookies["csrftoken"]},
            )
        return kind, answer.status_code

    with ThreadPoolExecutor(max_workers=len(attempts)) as pool:
        answers = list(pool.map(decide, attempts))
    assert all(code < 500 for _, code in answers), answers

    decided = Approval.objects.get(pk=approval.pk)
    assert decided.status == "approved"
    assert RunEvent.objects.filter(run_id=run_id, type="approval_decided").count() == 1
    run = wait_for(lambda: Run.objects.filter(pk=run_id, status__in=Run.FINAL).first(), 30)
    assert run.status == "succeeded", run.failure_reason
    assert Refund.objects.filter(order=order).count() == 1
    assert ToolExecution.objects.filter(run_id=run_id, tool="issue_refund").count() == 1
    started = RunEvent.objects.filter(run_id=run_id, type="tool_call_started")
    assert [e.data["tool"] for e in started].count("issue_refund") == 1
    # the winner is whoever decided; everyone else was told it was already decided
    winner = decided.decided_by.username
    links_ok = [c for k, c in answers if k == "link" and c == 200]
    assert len(links_ok) == (1 if winner in MAILERS else 0)
    respond_paths = {f"/respond/{s}" for s in SLACKERS}
    wait_for(lambda: {h.path for h in slack.accepted} >= respond_paths, 30)
    answers_to_slack = [h.json for h in slack.accepted if h.path in respond_paths]
    replaced = [a for a in answers_to_slack if a.get("replace_original")]
    refused = [a for a in answers_to_slack if a.get("response_type") == "ephemeral"]
    assert len(replaced) == (1 if winner in SLACKERS.values() else 0)
    assert len(refused) == 4 - len(replaced)
    assert all("already approved" in a["text"] for a in refused)


def test_a_slack_that_is_down_holds_up_nobody(
    stack: dict[str, Any], peers: dict[str, Any], people: dict[str, Any]
) -> None:
    smtp, slack, url = peers["smtp"], peers["slack"], stack["url"]
    slack.fail(10_000)  # Slack answers 500 to everything from now on
    try:
        run_id, _ = start_refund(url, peers)
        approval = Approval.objects.get(run_id=run_id)
        path = wait_for(lambda: link_of(smtp, "mailer0", approval.pk), 30)
        client = session(url, "mailer0")
        done = client.post(
            path, data={"decision": "approve", "csrfmiddlewaretoken": client.cookies["csrftoken"]}
        )
        assert done.status_code == 200
        run = wait_for(lambda: Run.objects.filter(pk=run_id, status__in=Run.FINAL).first(), 30)
        assert run.status == "succeeded"
        api = httpx.Client(base_url=url, headers=token("approver"), timeout=10)
        [shown] = [
            a for a in api.get("/api/approvals").json()["approvals"] if a["id"] == approval.pk
        ]
        by_channel = {(n["channel"], n["to"]): n for n in shown["notifications"]}
        assert by_channel[("email", "mailer0 <mailer0@example.test>")]["state"] == "sent"
        slack_note = by_channel[("slack", "Slack")]
        assert slack_note["state"] == "queued" and "HTTP 500" in slack_note["error"]
        assert urlsplit(url).netloc not in slack_note["error"]
    finally:
        slack._plan.clear()
