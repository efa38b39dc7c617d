"""Approval mails through a real SMTP server, and the decision links in them."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.test import Client
from django.utils import timezone

from agentweb.notify import actions as notify
from agentweb.notify.models import ApprovalLink
from agentweb.runs.models import Approval, Run
from tests.fakes.smtp_server import FakeSmtpServer
from tests.notify.conftest import SITE, announce, send_all, waiting_refund

LINK = re.compile(r"http://agentweb\.test/approvals/(\d+)/\?t=([A-Za-z0-9_-]+)")


def mailed_links(smtp: FakeSmtpServer) -> dict[str, str]:
    """addressee -> the link path in their mail."""
    out = {}
    for got in smtp.messages:
        found = LINK.search(got.text())
        assert found, got.text()
        out[got.envelope_to[0].split("@")[0]] = (
            urlsplit(found.group(0)).path + "?t=" + found.group(2)
        )
    return out


def login(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def status(approval: Approval) -> str:
    return Approval.objects.get(pk=approval.pk).status


@pytest.fixture
def mailed(team: dict[str, Any], smtp: FakeSmtpServer) -> tuple[Any, dict[str, str]]:
    waiting = waiting_refund(team["starter"])
    announce(waiting.approval)
    send_all()
    smtp.wait_for(3)
    return waiting, mailed_links(smtp)


def test_it_mails_everyone_who_may_decide_but_the_starter(
    team: dict[str, Any], smtp: FakeSmtpServer
) -> None:
    waiting = waiting_refund(team["starter"], amount=25)
    waiting_refund(team["alice"], amount=15, call_id="other", order="A1001")  # pending too
    announce(waiting.approval)
    assert send_all() == ["sent", "sent", "sent"]
    to = sorted(m.envelope_to[0] for m in smtp.wait_for(3))
    # approvers and the admin; not the operator, not the starter, not one without mail
    assert to == ["alice@example.test", "bob@example.test", "root@example.test"]
    mail = smtp.to("alice@example.test")[0]
    text = mail.text()
    assert mail.message["Subject"] == f"Decision needed: issue_refund on run #{waiting.run.pk}"
    assert "Why a person:  amount on order_id A1001 reaches 20 (total 25.00)" in text
    assert (
        "Rule:          the profile ticket-assistant's rule for issue_refund: a person "
        "approves once the amount of its calls on one order_id adds up to 20" in text
    )
    # this call and the total so far: 25 pending here + 15 pending in another run
    assert "This call: amount 25.00; total so far on order_id A1001: 40.00 of 20" in text
    assert "reason: parcel lost <b>by carrier</b>" in text
    assert f"Run #{waiting.run.pk} (ticket-assistant), started by starter" in text
    html = mail.html()
    assert "parcel lost &lt;b&gt;by carrier&lt;/b&gt;" in html and "<b>by carrier" not in html
    assert f'href="{SITE}/approvals/{waiting.approval.pk}/?t=' in html
    assert mail.message["Auto-Submitted"] == "auto-generated"
    # what reached whom, on the approval
    notes = notify.notifications(waiting.approval.pk)
    assert sorted((n["channel"], n["to"], n["state"]) for n in notes) == [
        ("email", "alice <alice@example.test>", "sent"),
        ("email", "bob <bob@example.test>", "sent"),
        ("email", "root <root@example.test>", "sent"),
    ]


def test_opening_a_link_decides_nothing(mailed: Any) -> None:
    waiting, links = mailed
    anonymous = Client()
    for _ in range(3):  # a mail scanner, a preview, the person
        page = anonymous.get(links["alice"])
        assert page.status_code == 200
        assert b"Approve" in page.content and b"amount on order_id A1001" in page.content
        assert b"sign in as <strong>alice</strong>" in page.content
    assert status(waiting.approval) == "pending"
    assert ApprovalLink.objects.filter(used_at__isnull=False).count() == 0


def test_the_post_decides_after_a_login_as_the_addressee(mailed: Any, team: dict[str, Any]) -> None:
    waiting, links = mailed
    anonymous = Client()
    answer = anonymous.post(links["alice"], {"decision": "approve"})
    assert answer.status_code == 302 and answer["Location"].startswith("/accounts/login/")
    assert status(waiting.approval) == "pending"
    alice = login(team["alice"])
    assert alice.get(links["alice"]).status_code == 200
    done = alice.post(links["alice"], {"decision": "approve"})
    assert done.status_code == 200 and b"approved" in done.content
    approval = Approval.objects.get(pk=waiting.approval.pk)
    assert approval.status == "approved" and approval.decided_by == team["alice"]
    assert Run.objects.get(pk=waiting.run.pk).status == "queued"
    # used: the same link again changes nothing and says so
    again = alice.post(links["alice"], {"decision": "reject", "comment": "no"})
    assert again.status_code == 410 and b"already used" in again.content
    assert status(waiting.approval) == "approved"
    # bob's link now says it is decided
    bob = login(team["bob"])
    late = bob.post(links["bob"], {"decision": "reject", "comment": "no"})
    assert late.status_code == 409 and b"already approved by alice" in late.content


def test_someone_elses_link_is_refused(mailed: Any, team: dict[str, Any]) -> None:
    waiting, links = mailed
    bob = login(team["bob"])
    page = bob.get(links["alice"])
    assert page.status_code == 200 and b"sent to <strong>alice</strong>" in page.content
    answer = bob.post(links["alice"], {"decision": "approve"})
    assert answer.status_code == 403 and b"someone else" in answer.content
    assert status(waiting.approval) == "pending"
    assert ApprovalLink.objects.filter(used_at__isnull=False).count() == 0


@pytest.mark.parametrize("how", ["altered", "cut", "other approval"])
def test_an_altered_link_is_refused(mailed: Any, team: dict[str, Any], how: str) -> None:
    waiting, links = mailed
    path, _, token = links["alice"].partition("?t=")
    if how == "altered":
        url = f"{path}?t={token[:-1]}{'A' if token[-1] != 'A' else 'B'}"
    elif how == "cut":
        url = f"{path}?t={token[:20]}"
    else:
        other = waiting_refund(team["starter"], call_id="call-2")
        url = f"/approvals/{other.approval.pk}/?t={token}"
    alice = login(team["alice"])
    assert alice.get(url).status_code == 404
    answer = alice.post(url, {"decision": "approve"})
    assert answer.status_code == 404 and b"not valid" in answer.content
    assert status(waiting.approval) == "pending"


def test_an_expired_request_stops_its_links(mailed: Any, team: dict[str, Any]) -> None:
    waiting, links = mailed
    Approval.objects.filter(pk=waiting.approval.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    alice = login(team["alice"])
    answer = alice.post(links["alice"], {"decision": "approve"})
    assert answer.status_code == 410 and b"expired" in answer.content
    assert status(waiting.approval) == "pending"  # the expiry sweep denies it, not a click


def test_changed_arguments_stop_the_links(mailed: Any, team: dict[str, Any]) -> None:
    waiting, links = mailed
    changed = {"order_id": "A1001", "amount": 99, "reason": "edited"}  # as a first approver may
    Approval.objects.filter(pk=waiting.approval.pk).update(edited_arguments=changed)
    answer = login(team["alice"]).post(links["alice"], {"decision": "approve"})
    assert answer.status_code == 409 and b"changed" in answer.content
    assert status(waiting.approval) == "pending"


def test_a_rejection_by_link_needs_a_reason(mailed: Any, team: dict[str, Any]) -> None:
    waiting, links = mailed
    alice = login(team["alice"])
    answer = alice.post(links["alice"], {"decision": "reject", "comment": "  "})
    assert answer.status_code == 302 and status(waiting.approval) == "pending"
    answer = alice.post(links["alice"], {"decision": "reject", "comment": "Order was refunded"})
    assert answer.status_code == 200
    approval = Approval.objects.get(pk=waiting.approval.pk)
    assert (approval.status, approval.comment) == ("rejected", "Order was refunded")


def test_a_lost_permission_refuses_the_link(mailed: Any, team: dict[str, Any]) -> None:
    waiting, links = mailed
    alice = team["alice"]
    alice.groups.clear()
    answer = login(alice).post(links["alice"], {"decision": "approve"})
    assert answer.status_code == 403
    assert status(waiting.approval) == "pending"
    assert ApprovalLink.objects.filter(used_at__isnull=False).count() == 0


def test_without_mail_nothing_is_mailed(team: dict[str, Any], settings: Any) -> None:
    settings.AGENTWEB_SMTP = None
    waiting = waiting_refund(team["starter"])
    announce(waiting.approval)
    assert notify.notifications(waiting.approval.pk) == []
    assert ApprovalLink.objects.count() == 0


def test_the_inbox_and_the_api_say_what_reached_whom(
    team: dict[str, Any], smtp: FakeSmtpServer
) -> None:
    waiting = waiting_refund(team["starter"])
    announce(waiting.approval)
    smtp.refuse(1, "550 5.1.1 No such user")  # the first mail (alice's) bounces for good
    send_all()
    alice = login(team["alice"])
    [shown] = alice.get("/api/approvals?status=pending").json()["approvals"]
    told = {n["to"]: (n["channel"], n["state"], n["error"]) for n in shown["notifications"]}
    assert told["bob <bob@example.test>"] == ("email", "sent", None)
    channel, state, error = told["alice <alice@example.test>"]
    assert (channel, state) == ("email", "failed") and "550" in error
    inbox = alice.get("/approvals/").content.decode()
    assert (
        "Told:" in inbox and "email bob &lt;bob@example.test&gt; · <strong>sent</strong>" in inbox
    )
    assert "No such user" in inbox
    page = alice.get(f"/approvals/{waiting.approval.pk}/").content.decode()
    assert 'id="notifications"' in page and "No such user" in page
