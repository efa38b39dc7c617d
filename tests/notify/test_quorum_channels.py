"""Quorum across channels (issue 25.4 with 25.1 and 25.2): a call needing two people gets
its first approval by a Slack click (signed as Slack signs it, answered through
response_url on a receiver playing Slack) and its second through a mailed link (a real
SMTP server). The same person by another channel counts once; the starter's click counts
for nothing; each channel says "1 of 2" while it gathers."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from agentweb.notify.messages import APPROVE
from agentweb.runs.models import Approval, ApprovalVote, Run
from tests.fakes.receiver import Receiver
from tests.fakes.slack import block_actions, button, signed
from tests.fakes.smtp_server import FakeSmtpServer
from tests.notify.conftest import SLACK_SECRET, announce, send_all, waiting_refund
from tests.notify.test_mail import mailed_links

HOOK = "/hooks/slack/interactions"


@pytest.fixture
def two_needed(
    team: dict[str, Any], smtp: FakeSmtpServer, slack: Receiver, settings: Any
) -> dict[str, Any]:
    settings.AGENTWEB_SLACK_USERS = {"UALICE": "alice", "UBOB": "bob", "USTARTER": "starter"}
    waiting = waiting_refund(team["starter"])
    Approval.objects.filter(pk=waiting.approval.pk).update(approvals_needed=2)
    waiting.approval.approvals_needed = 2
    announce(waiting.approval)
    assert sorted(send_all()) == ["sent"] * 4  # alice, bob, root by mail; one Slack message
    smtp.wait_for(3)
    [posted] = slack.wait_for(1)
    return {"waiting": waiting, "links": mailed_links(smtp), "message": posted.json}


def click(slack: Receiver, message: dict[str, Any], user_id: str, respond: str) -> Any:
    payload = block_actions(
        user_id=user_id,
        action_id=APPROVE,
        value=button(message, APPROVE)["value"],
        response_url=slack.url(respond),
        message=message,
    )
    body, headers = signed(SLACK_SECRET, payload)
    return Client().post(HOOK, data=body, content_type=headers.pop("Content-Type"), headers=headers)


def answers(slack: Receiver, path: str) -> list[dict[str, Any]]:
    send_all("slackresponse")
    return [h.json for h in slack.accepted if h.path == path]


def login(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_slack_click_and_a_mailed_link_make_the_two_approvals(
    two_needed: dict[str, Any], team: dict[str, Any], slack: Receiver
) -> None:
    waiting, links, message = two_needed["waiting"], two_needed["links"], two_needed["message"]
    approval_id = waiting.approval.pk
    # the starter's click: refused, nothing counted
    assert click(slack, message, "USTARTER", "/r/starter").status_code == 200
    [refused] = answers(slack, "/r/starter")
    assert refused["response_type"] == "ephemeral" and "you started this run" in refused["text"]
    assert not ApprovalVote.objects.filter(approval_id=approval_id).exists()
    # alice approves in Slack: 1 of 2, the message keeps its buttons for the next person
    assert click(slack, message, "UALICE", "/r/alice").status_code == 200
    [update] = answers(slack, "/r/alice")
    assert update["replace_original"] is True
    assert "approved by alice (1 of 2), one more person needed" in update["text"]
    assert any(b["type"] == "actions" for b in update["blocks"])
    approval = Approval.objects.get(pk=approval_id)
    assert approval.status == "pending" and approval.approvals_given() == 1
    assert Run.objects.get(pk=waiting.run.pk).status == "waiting_approval"
    # alice again, by her mailed link: the same person counts once
    alice = login(team["alice"])
    page = alice.get(links["alice"])
    assert page.status_code == 200 and b"1 of 2" in page.content
    again = alice.post(links["alice"], {"decision": "approve"})
    assert again.status_code == 409 and b"already approved" in again.content
    assert ApprovalVote.objects.filter(approval_id=approval_id).count() == 1
    # bob's link makes the second: approved, once, and the run goes on
    done = login(team["bob"]).post(links["bob"], {"decision": "approve"})
    assert done.status_code == 200 and b"approved" in done.content
    approval = Approval.objects.get(pk=approval_id)
    assert approval.status == "approved" and approval.decided_by == team["bob"]
    voters = ApprovalVote.objects.filter(approval_id=approval_id).order_by("pk")
    assert [v.user.username for v in voters] == ["alice", "bob"]
    assert Run.objects.get(pk=waiting.run.pk).status == "queued"
    # a click on the old message now: already decided, told ephemerally
    click(slack, message, "UBOB", "/r/late")
    [late] = answers(slack, "/r/late")
    assert late["response_type"] == "ephemeral" and "already approved" in late["text"]
    assert ApprovalVote.objects.filter(approval_id=approval_id).count() == 2


def test_three_needed_says_how_many_more(
    two_needed: dict[str, Any], team: dict[str, Any], slack: Receiver
) -> None:
    waiting, message = two_needed["waiting"], two_needed["message"]
    Approval.objects.filter(pk=waiting.approval.pk).update(approvals_needed=3)
    click(slack, message, "UALICE", "/r/alice")
    [update] = answers(slack, "/r/alice")
    assert "approved by alice (1 of 3), two more people needed" in update["text"]
