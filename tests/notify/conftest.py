"""People, a run waiting for an approval, and the channels pointed at real test peers."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from agentweb.outbox.config import parse_smtp_url
from agentweb.outbox.models import Delivery
from agentweb.runs.models import AgentProfile, Approval, Run, RunEvent, arguments_hash
from tests.fakes.receiver import Receiver
from tests.fakes.smtp_server import FakeSmtpServer

# The engine's fixtures (people, a scripted model, the sample tools), for runs in-process.
from tests.runs.conftest import enqueued, people, sample_registry, scripted  # noqa: F401

SITE = "http://agentweb.test"
SLACK_SECRET = "slack-signing-secret"
PASSWORD = "pw-123456789"


@pytest.fixture
def team(db: None) -> dict[str, Any]:
    """Roles and people: two approvers, an admin, an operator (all with mail), an
    approver without mail, and ``starter``, an approver who starts the runs."""
    from django.contrib.auth import get_user_model

    from agentweb.accounts.roles import ensure_roles
    from agentweb.runs.profiles import seed_profiles

    groups = ensure_roles()
    User = get_user_model()
    found = {}
    for name, role, mail in [
        ("alice", "approver", "alice@example.test"),
        ("bob", "approver", "bob@example.test"),
        ("root", "admin", "root@example.test"),
        ("oscar", "operator", "oscar@example.test"),
        ("nomail", "approver", ""),
        ("starter", "approver", "starter@example.test"),
    ]:
        user = User.objects.create_user(name, email=mail, password=PASSWORD)
        user.groups.add(groups[role])
        found[name] = User.objects.get(pk=user.pk)
    seed_profiles()
    return found


@dataclass
class Waiting:
    run: Run
    approval: Approval


def waiting_refund(
    starter: Any, *, amount: float = 25, order: str = "A1001", call_id: str = "call-1"
) -> Waiting:
    """A run of the ticket assistant waiting for a person on ``issue_refund`` (the
    bundled rule: amount >= 20 summed per order_id), as the engine leaves it."""
    run = Run.objects.create(
        task=f"Refund order {order}: the parcel never came",
        agent=AgentProfile.objects.get(name="ticket-assistant"),
        created_by=starter,
        status=Run.Status.WAITING_APPROVAL,
    )
    args = {"order_id": order, "amount": amount, "reason": "parcel lost <b>by carrier</b>"}
    approval = Approval.objects.create(
        run=run,
        call_id=call_id,
        tool="issue_refund",
        arguments=args,
        arguments_hash=arguments_hash(args),
        risk="high",
        reason="policy",
        expires_at=timezone.now() + timedelta(hours=1),
    )
    why = f"amount on order_id {order} reaches 20 (total {amount:.2f})"
    RunEvent.objects.create(
        run=run,
        seq=1,
        type="approval_requested",
        data={"call_id": call_id, "tool": "issue_refund", "arguments": args, "risk": "high",
              "reason": "policy", "why": why},
    )  # fmt: skip
    Run.objects.filter(pk=run.pk).update(last_seq=1)
    run.last_seq = 1
    return Waiting(
        run, Approval.objects.select_related("run__agent", "run__created_by").get(pk=approval.pk)
    )


@pytest.fixture
def smtp(settings: Any) -> Iterator[FakeSmtpServer]:
    with FakeSmtpServer() as server:
        settings.AGENTWEB_SMTP = parse_smtp_url(server.url)
        settings.AGENTWEB_MAIL_FROM = "agentweb@example.test"
        settings.AGENTWEB_SITE_URL = SITE
        yield server


@pytest.fixture
def slack(settings: Any) -> Iterator[Receiver]:
    """Slack's side: the incoming webhook and the response_url, on one receiver."""
    with Receiver() as receiver:
        settings.AGENTWEB_SLACK_WEBHOOK_URL = receiver.url("/services/T1/B1/incoming")
        settings.AGENTWEB_SLACK_SIGNING_SECRET = SLACK_SECRET
        settings.AGENTWEB_SITE_URL = SITE
        yield receiver


def announce(approval: Approval) -> None:
    """What the request's step and, after it commits, a worker's lane do."""
    from agentweb.notify import actions as notify

    notify.do_notify_requested(approval)
    notify.do_announce(approval.pk)


def send_all(about: str | None = None) -> list[str | None]:
    """Attempt every queued delivery once, in order (what the worker would do)."""
    from agentweb.outbox import actions as outbox

    rows = Delivery.objects.filter(state="queued").order_by("pk")
    if about is not None:
        rows = rows.filter(about_type=about)
    return [outbox.do_attempt_delivery(pk) for pk in rows.values_list("pk", flat=True)]
