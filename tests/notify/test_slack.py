"""Slack: a Block Kit message per request through the incoming webhook (a receiver of
ours playing Slack), clicks signed as Slack signs them, answers through response_url."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.test import Client

from agentweb.notify import actions as notify
from agentweb.notify.messages import APPROVE, REJECT
from agentweb.notify.models import SlackIdentity
from agentweb.runs.models import Approval
from tests.fakes.receiver import Receiver
from tests.fakes.slack import block_actions, button, signed
from tests.notify.conftest import SLACK_SECRET, announce, send_all, waiting_refund

HOOK = "/hooks/slack/interactions"


@pytest.fixture
def posted(team: dict[str, Any], slack: Receiver, settings: Any) -> tuple[Any, dict[str, Any]]:
    settings.AGENTWEB_SLACK_USERS = {"UALICE": "alice", "USTARTER": "starter", "UOSCAR": "oscar"}
    SlackIdentity.objects.create(user=team["bob"], slack_id="UBOB")
    waiting = waiting_refund(team["starter"])
    announce(waiting.approval)
    assert send_all() == ["sent"]
    [hit] = slack.wait_for(1)
    return waiting, hit.json


def click(
    slack: Receiver,
    message: dict[str, Any],
    user_id: str,
    action: str = APPROVE,
    *,
    secret: str = SLACK_SECRET,
    timestamp: int | None = None,
) -> Any:
    payload = block_actions(
        user_id=user_id,
        action_id=action,
        value=button(message, action)["value"],
        response_url=slack.url("/actions/T1/respond"),
        message=message,
    )
    body, headers = signed(secret, payload, timestamp=timestamp)
    answer = Client().post(
        HOOK, data=body, content_type=headers.pop("Content-Type"), headers=headers
    )
    return answer


def responses(slack: Receiver) -> list[dict[str, Any]]:
    send_all("slackresponse")
    return [h.json for h in slack.accepted if h.path == "/actions/T1/respond"]


def status(waiting: Any) -> str:
    return Approval.objects.get(pk=waiting.approval.pk).status


def test_the_message_says_why_and_carries_buttons(posted: Any) -> None:
    waiting, message = posted
    text = str(message)
    assert "amount on order_id A1001 reaches 20 (total 25.00)" in text
    assert "the profile ticket-assistant's rule for issue_refund" in text
    assert "This call: amount 25.00; total so far on order_id A1001: 25.00 of 20" in text
    # untrusted text is escaped for Slack's mrkdwn
    assert "parcel lost &lt;b&gt;by carrier&lt;/b&gt;" in text and "<b>" not in text
    value = button(message, APPROVE)["value"]
    assert f'"approval": {waiting.approval.pk}' in value
    assert button(message, REJECT)["style"] == "danger"
    [note] = notify.notifications(waiting.approval.pk)
    assert {k: note[k] for k in ("channel", "to", "state", "error")} == {
        "channel": "slack", "to": "Slack", "state": "sent", "error": None,
    }  # fmt: skip


def test_a_click_decides_and_the_message_is_replaced(posted: Any, slack: Receiver) -> None:
    waiting, message = posted
    answer = click(slack, message, "UALICE")
    assert answer.status_code == 200
    approval = Approval.objects.get(pk=waiting.approval.pk)
    assert approval.status == "approved" and approval.decided_by.username == "alice"
    [update] = responses(slack)
    assert update["replace_original"] is True
    assert "approved by alice" in update["text"]
    assert not any(b["type"] == "actions" for b in update["blocks"])  # no buttons any more


def test_a_slack_id_set_in_the_admin_counts(posted: Any, slack: Receiver) -> None:
    waiting, message = posted
    click(slack, message, "UBOB", REJECT)
    approval = Approval.objects.get(pk=waiting.approval.pk)
    assert (approval.status, approval.decided_by.username) == ("rejected", "bob")
    assert approval.comment == "Rejected in Slack by bob."


@pytest.mark.parametrize(
    "who, words",
    [
        ("UNOBODY", "not linked to an agentweb user"),
        ("USTARTER", "you started this run"),
        ("UOSCAR", "only approvers and admins decide"),
    ],
)
def test_refusals_are_ephemeral_and_decide_nothing(
    posted: Any, slack: Receiver, who: str, words: str
) -> None:
    waiting, message = posted
    assert click(slack, message, who).status_code == 200
    assert status(waiting) == "pending"
    [answer] = responses(slack)
    assert answer["response_type"] == "ephemeral" and answer["replace_original"] is False
    assert words in answer["text"]


def test_already_decided_is_told_ephemerally(posted: Any, slack: Receiver) -> None:
    waiting, message = posted
    click(slack, message, "UALICE")
    click(slack, message, "UBOB", REJECT)
    assert status(waiting) == "approved"
    first, second = responses(slack)
    assert second["response_type"] == "ephemeral"
    assert "already approved" in second["text"]


@pytest.mark.parametrize(
    "how", ["wrong secret", "too old", "from the future", "unsigned", "body changed"]
)
def test_a_bad_signature_is_401_and_decides_nothing(posted: Any, slack: Receiver, how: str) -> None:
    waiting, message = posted
    payload = block_actions(
        user_id="UALICE",
        action_id=APPROVE,
        value=button(message, APPROVE)["value"],
        response_url=slack.url("/actions/T1/respond"),
    )
    secret = "not-the-secret" if how == "wrong secret" else SLACK_SECRET
    ts = {"too old": int(time.time()) - 301, "from the future": int(time.time()) + 301}.get(how)
    body, headers = signed(secret, payload, timestamp=ts)
    if how == "unsigned":
        del headers["X-Slack-Signature"]
    if how == "body changed":
        body = body.replace(b"UALICE", b"UBOB00")
    answer = Client().post(
        HOOK, data=body, content_type=headers.pop("Content-Type"), headers=headers
    )
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "bad_signature"
    assert status(waiting) == "pending" and responses(slack) == []


def test_a_button_for_changed_arguments_decides_nothing(posted: Any, slack: Receiver) -> None:
    waiting, message = posted
    changed = {"order_id": "A1001", "amount": 99, "reason": "edited"}  # as a first approver may
    Approval.objects.filter(pk=waiting.approval.pk).update(edited_arguments=changed)
    click(slack, message, "UALICE")
    assert status(waiting) == "pending"
    assert "changed" in responses(slack)[0]["text"]


def test_garbage_gets_json_answers(posted: Any) -> None:
    waiting, _ = posted
    body, headers = signed(SLACK_SECRET, {"type": "view_closed"})
    ok = Client().post(HOOK, data=body, content_type=headers.pop("Content-Type"), headers=headers)
    assert ok.status_code == 200 and "ignored" in ok.json()
    raw = b"payload=%7Bnot+json"
    _, headers = signed(SLACK_SECRET, {})
    from agentweb.signing import slack_signature

    headers["X-Slack-Signature"] = slack_signature(
        SLACK_SECRET, headers["X-Slack-Request-Timestamp"], raw
    )
    bad = Client().post(HOOK, data=raw, content_type=headers.pop("Content-Type"), headers=headers)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid"
    assert Client().get(HOOK).status_code == 405
    assert Client().get(HOOK)["Content-Type"].startswith("application/json")
    assert status(waiting) == "pending"
