"""Webhooks out: approval and run events from real runs (the engine in-process, a scripted
model), signed, in order per run, retried, with delivery ids a receiver can dedupe."""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from agentweb.notify import actions as notify
from agentweb.outbox.models import Delivery
from agentweb.runs import actions, engine
from agentweb.runs.models import Approval, Run
from agentweb.runtime.testing import call
from tests.fakes.receiver import Receiver
from tests.notify.conftest import send_all

pytestmark = pytest.mark.django_db(transaction=True)


def secret_of(url: str) -> str:
    out = io.StringIO()
    call_command("webhooks", "secret", url, stdout=out, stderr=io.StringIO())
    return out.getvalue().strip().splitlines()[-1]


@pytest.fixture
def hooks(settings: Any) -> Any:
    with Receiver() as receiver:
        settings.AGENTWEB_WEBHOOKS = [receiver.url("/agentweb")]
        receiver.secret = secret_of(receiver.url("/agentweb"))  # as its owner would
        yield receiver


def start(people: dict[str, Any]) -> Run:
    return actions.do_create_run(user=people["operator"], task="Pay back A1")


def events(hooks: Receiver) -> list[tuple[str, Any]]:
    return [(h.json["event"], h.json["data"].get("status")) for h in hooks.unique()]


def test_a_run_tells_its_webhooks_what_happened_in_order(
    people: Any, scripted: Any, enqueued: Any, hooks: Receiver
) -> None:
    scripted.enqueue(call("pay_out", order_id="A1", amount=30), "Paid back 30.")
    run = start(people)
    assert engine.execute_run(run.pk) == "waiting_approval"
    approval = Approval.objects.get(run=run)
    actions.do_decide_approval(approval_id=approval.pk, user=people["approver"], decision="approve")
    assert engine.execute_run(run.pk) == "succeeded"
    hooks.fail(2)  # the receiver is down for the first two tries: order still holds
    for _ in range(6):
        send_all("approval") + send_all("run")
        Delivery.objects.filter(state="queued").update(next_attempt_at=timezone.now())
    assert events(hooks) == [
        ("approval.requested", None),
        ("approval.decided", None),
        ("run.finished", "succeeded"),
    ]
    first, decided, finished = (h.json for h in hooks.unique())
    assert set(first) == {"event", "delivery_id", "at", "data"}
    assert first["data"]["run"] == run.pk
    shown = first["data"]["approval"]
    assert (
        shown["id"] == approval.pk and shown["tool"] == "pay_out" and shown["status"] == "pending"
    )
    assert shown["approvals_needed"] == 1 and shown["approvals_given"] == 0
    assert "notifications" in shown
    assert decided["data"]["approval"]["status"] == "approved"
    assert decided["data"]["approval"]["decided_by"] == "approver"
    # every POST verified with the secret `manage.py webhooks secret URL` printed
    assert len(hooks.rejected) == 2 and all(h.reason == "planned failure" for h in hooks.rejected)
    assert len({h.json["delivery_id"] for h in hooks.accepted}) == 3


def test_expiry_and_failure_are_told(
    people: Any, scripted: Any, enqueued: Any, hooks: Receiver
) -> None:
    scripted.enqueue(call("pay_out", order_id="A1", amount=30))
    run = start(people)
    engine.execute_run(run.pk)
    Approval.objects.filter(run=run).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert actions.do_expire_approvals() == 1
    send_all()
    assert [e for e, _ in events(hooks)] == ["approval.requested", "approval.expired"]
    expired = hooks.unique()[-1].json["data"]["approval"]
    assert expired["status"] == "expired"


def test_a_failed_run_is_told(people: Any, scripted: Any, enqueued: Any, hooks: Receiver) -> None:
    scripted.enqueue(*[RuntimeError("the model is away")] * 3)
    run = start(people)
    for _ in range(3):  # an error is retried twice, then the run fails
        status = engine.execute_run(run.pk)
    assert status == "failed"
    send_all()
    assert events(hooks) == [("run.failed", "failed")]


def test_a_wrong_secret_is_refused_by_the_receiver(
    people: Any, scripted: Any, enqueued: Any, hooks: Receiver
) -> None:
    hooks.secret = secret_of("https://another.example/hook")
    scripted.enqueue(call("pay_out", order_id="A1", amount=30))
    run = start(people)
    engine.execute_run(run.pk)
    assert send_all() == ["queued"]
    assert hooks.accepted == [] and "signature" in hooks.rejected[0].reason


def test_the_secret_command_says_what_it_is(settings: Any) -> None:
    settings.AGENTWEB_WEBHOOKS = ["https://hooks.example/agentweb"]
    out, err = io.StringIO(), io.StringIO()
    call_command("webhooks", "secret", "https://hooks.example/agentweb", stdout=out, stderr=err)
    last = out.getvalue().strip().splitlines()[-1]
    assert last == notify.webhook_secret("https://hooks.example/agentweb") and len(last) == 64
    assert err.getvalue() == ""
    call_command("webhooks", "secret", "https://elsewhere.example/x", stdout=out, stderr=err)
    assert "not in AGENTWEB_WEBHOOKS" in err.getvalue()
