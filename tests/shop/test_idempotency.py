"""Write tools honour the idempotency key: the same call twice changes the shop once."""

from __future__ import annotations

import threading

import pytest

from agentweb.shop.actions import ShopRuleError
from agentweb.shop.models import (
    AddressChange,
    CarrierEscalation,
    CustomerFact,
    CustomerNote,
    Order,
    Refund,
    WriteRecord,
)
from agentweb.tickets.models import Message

from .conftest import make_customer, make_order

WRITES = [
    ("issue_refund", {"order_id": "A1003", "amount": 25, "reason": "Damaged"}, Refund),
    ("cancel_order", {"order_id": "A1001", "reason": "Wrong size"}, Order),
    (
        "update_shipping_address",
        {"order_id": "A1001", "address": "48 Harbor Street, Portland, OR 97201"},
        AddressChange,
    ),
    ("send_customer_reply", {"customer_id": "C001", "message": "Hello"}, Message),
    ("add_customer_note", {"customer_id": "C001", "note": "Called back"}, CustomerNote),
    (
        "escalate_to_carrier",
        {"tracking_number": "1ZAAAAAA0300000001", "reason": "Not moving"},
        CarrierEscalation,
    ),
    (
        "remember_customer_fact",
        {"customer_id": "C001", "key": "preferred_contact", "value": "email"},
        CustomerFact,
    ),
]


def _snapshot(model):
    if model is Order:
        return list(Order.objects.values_list("number", "status", "cancelled_at"))
    return model.objects.count()


@pytest.mark.parametrize(("tool", "arguments", "model"), WRITES, ids=[w[0] for w in WRITES])
def test_it_performs_a_repeated_call_once(shop, call, tool, arguments, model):
    first = call(tool, call_id="call_7", **arguments)
    after_first = _snapshot(model)
    refunds = Refund.objects.count()
    second = call(tool, call_id="call_7", **arguments)
    assert second == first
    assert _snapshot(model) == after_first
    assert Refund.objects.count() == refunds
    assert WriteRecord.objects.filter(key="run1:call_7", tool=tool).count() == 1


def test_it_repeats_the_first_result_even_when_the_rule_would_now_refuse(shop, call):
    args = {"order_id": "A1003", "amount": 80, "reason": "Full refund"}
    first = call("issue_refund", call_id="k", **args)
    # A fresh call would exceed the captured amount; the replay returns the first result.
    assert call("issue_refund", call_id="k", **args) == first
    with pytest.raises(ShopRuleError, match="exceeds"):
        call("issue_refund", call_id="other", **args)
    assert Refund.objects.count() == 1


def test_it_scopes_keys_by_run(shop, call):
    call("add_customer_note", run_id="r1", call_id="call_1", customer_id="C001", note="One")
    call("add_customer_note", run_id="r2", call_id="call_1", customer_id="C001", note="Two")
    assert CustomerNote.objects.count() == 2


def test_it_refuses_a_key_reused_by_another_tool(shop, call):
    call("add_customer_note", call_id="dup", customer_id="C001", note="A note")
    with pytest.raises(ShopRuleError, match="already used by add_customer_note"):
        call("issue_refund", call_id="dup", order_id="A1003", amount=5, reason="Goodwill")
    assert not Refund.objects.exists()


def test_it_does_not_record_a_refused_write(shop, call):
    with pytest.raises(ShopRuleError):
        call("cancel_order", call_id="c", order_id="A1002", reason="Too late")
    assert not WriteRecord.objects.exists()


def test_it_refunds_once_when_the_same_call_races(transactional_db, call):
    customer = make_customer()
    make_order(customer, "A1003", status="delivered", price="80.00")
    results, errors = [], []
    barrier = threading.Barrier(4)

    def worker() -> None:
        from django.db import connection

        try:
            barrier.wait()
            results.append(
                call("issue_refund", call_id="race", order_id="A1003", amount=30, reason="Race")
            )
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(results) == 4 and all(r == results[0] for r in results)
    assert Refund.objects.count() == 1


def test_it_never_over_refunds_under_concurrent_different_calls(transactional_db, call):
    customer = make_customer()
    make_order(customer, "A1003", status="delivered", price="80.00")
    barrier = threading.Barrier(5)
    outcomes: list[str] = []

    def worker(n: int) -> None:
        from django.db import connection

        try:
            barrier.wait()
            call("issue_refund", call_id=f"c{n}", order_id="A1003", amount=30, reason="Race")
            outcomes.append("ok")
        except ShopRuleError:
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["ok", "ok", "refused", "refused", "refused"]
    assert sum(r.amount for r in Refund.objects.all()) == 60
