"""Escalation to a group after N minutes (once), one reminder before expiry (once)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.utils import timezone

from agentweb.notify import actions as notify
from agentweb.notify.models import ApprovalLink, ApprovalNotice
from agentweb.outbox.models import Delivery
from agentweb.runs import actions
from tests.fakes.receiver import Receiver
from tests.fakes.smtp_server import FakeSmtpServer
from tests.notify.conftest import announce, send_all, waiting_refund


@pytest.fixture
def escalation(team: dict[str, Any], settings: Any) -> dict[str, Any]:
    from django.contrib.auth import get_user_model

    settings.AGENTWEB_ESCALATE_AFTER_MINUTES = 0.05  # 3 s
    settings.AGENTWEB_ESCALATION_GROUP = "escalation"
    settings.AGENTWEB_APPROVAL_REMIND_MINUTES = 30
    group = Group.objects.create(name="escalation")  # the shift leads: approvers too
    carol = get_user_model().objects.create_user("carol", email="carol@example.test")
    carol.groups.add(group, Group.objects.get(name="approver"))
    idle = get_user_model().objects.create_user("idle", email="idle@example.test")
    idle.groups.add(group)  # in the group, but no approver: may not decide, not told
    group.user_set.add(team["starter"])  # the run's starter never decides its calls
    return {"carol": carol}


def mailed_to(topic: str) -> list[str]:
    return sorted(
        Delivery.objects.filter(channel="email", topic=topic).values_list("target", flat=True)
    )


def test_it_escalates_once_after_the_minutes(
    team: Any, escalation: Any, smtp: FakeSmtpServer, slack: Receiver
) -> None:
    waiting = waiting_refund(team["starter"])
    announce(waiting.approval)
    # the group hears of it only when it escalates
    first = ["alice@example.test", "bob@example.test", "root@example.test"]
    assert mailed_to("approval.requested") == first
    now = timezone.now()
    assert notify.do_escalate_and_remind(now + timedelta(seconds=1)) == 0
    assert notify.do_escalate_and_remind(now + timedelta(seconds=4)) == 1
    assert mailed_to("approval.escalated") == ["carol@example.test"]
    assert notify.do_escalate_and_remind(now + timedelta(seconds=8)) == 0  # once
    assert Delivery.objects.filter(channel="slack", topic="approval.escalated").count() == 1
    send_all()
    carol = smtp.to("carol@example.test")[0]
    assert carol.message["Subject"].startswith("Escalated: issue_refund on run")
    assert "is escalated to you" in carol.text()
    assert ApprovalLink.objects.filter(user=escalation["carol"], purpose="escalated").count() == 1
    titles = [h.json["blocks"][0]["text"]["text"] for h in slack.accepted]
    assert titles == [
        "issue_refund needs your decision",
        "issue_refund is escalated to you (nobody decided it yet)",
    ]


def test_a_decided_request_is_not_escalated(team: Any, escalation: Any, smtp: Any) -> None:
    waiting = waiting_refund(team["starter"])
    announce(waiting.approval)
    actions.do_decide_approval(
        approval_id=waiting.approval.pk, user=team["alice"], decision="approve"
    )
    assert notify.do_escalate_and_remind(timezone.now() + timedelta(hours=2)) == 0
    assert mailed_to("approval.escalated") == mailed_to("approval.reminder") == []


def test_one_reminder_goes_to_those_first_told(team: Any, escalation: Any, smtp: Any) -> None:
    waiting = waiting_refund(team["starter"])  # expires in an hour
    announce(waiting.approval)
    notice = ApprovalNotice.objects.get(approval=waiting.approval)
    assert notice.remind_at == waiting.approval.expires_at - timedelta(minutes=30)
    now = timezone.now()
    assert notify.do_escalate_and_remind(now + timedelta(minutes=29)) == 1  # the escalation
    assert notify.do_escalate_and_remind(now + timedelta(minutes=31)) == 1  # the reminder
    assert notify.do_escalate_and_remind(now + timedelta(minutes=40)) == 0
    first = ["alice@example.test", "bob@example.test", "root@example.test"]
    assert mailed_to("approval.requested") == first
    assert mailed_to("approval.reminder") == first  # not carol, escalated to later
    send_all()
    reminder = smtp.to("bob@example.test")[-1]
    assert reminder.message["Subject"].startswith("Reminder: ")
    assert "still waits for a decision" in reminder.text()


def test_a_short_request_gets_no_reminder(team: Any, settings: Any, smtp: Any) -> None:
    settings.AGENTWEB_APPROVAL_REMIND_MINUTES = 60
    waiting = waiting_refund(team["starter"])
    waiting.approval.expires_at = timezone.now() + timedelta(minutes=30)
    waiting.approval.save(update_fields=["expires_at"])
    announce(waiting.approval)
    assert ApprovalNotice.objects.get(approval=waiting.approval).remind_at is None


def test_an_expired_request_is_neither_escalated_nor_reminded(
    team: Any, escalation: Any, smtp: Any
) -> None:
    waiting = waiting_refund(team["starter"])
    announce(waiting.approval)
    after = waiting.approval.expires_at + timedelta(seconds=1)
    assert notify.do_escalate_and_remind(after) == 0
    assert actions.do_expire_approvals(after) == 1


def test_mails_are_made_after_the_step_and_a_lost_wake_up_is_swept(
    team: Any, smtp: FakeSmtpServer
) -> None:
    waiting = waiting_refund(team["starter"])
    notify.do_notify_requested(waiting.approval)  # in the step's transaction: the plan only
    assert Delivery.objects.filter(channel="email").count() == 0
    notice = ApprovalNotice.objects.get(approval=waiting.approval)
    assert notice.announced_at is None
    now = timezone.now()
    assert notify.do_escalate_and_remind(now + timedelta(seconds=5)) == 0  # not late yet
    assert notify.do_escalate_and_remind(now + timedelta(seconds=16)) == 1  # the wake-up was lost
    assert mailed_to("approval.requested") == [
        "alice@example.test", "bob@example.test", "root@example.test",
    ]  # fmt: skip
    assert notify.do_announce(waiting.approval.pk) is False  # once
    assert Delivery.objects.filter(channel="email").count() == 3
