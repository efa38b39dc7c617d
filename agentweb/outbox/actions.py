"""Every write to the outbox: queue a delivery (in the caller's transaction), attempt it
(claimed by a conditional UPDATE), sweep what is due. See the package docstring."""

from __future__ import annotations

import json
import logging
import random
import re
import uuid
from collections.abc import Callable, Iterable
from datetime import timedelta
from email.message import EmailMessage
from email.policy import SMTP
from email.utils import format_datetime, parseaddr
from typing import Any

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connections, transaction
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone

from agentweb.outbox import lanes
from agentweb.outbox.models import Delivery, NotificationJson, lane_of
from agentweb.outbox.transports import SENDERS, DeliveryError
from agentweb.runs import queue

log = logging.getLogger(__name__)

DELIVER_TASK = "agentweb.outbox.tasks.deliver"
#: A wake-up that reached no attempt within this time is sent again by the sweep.
DISPATCH_GRACE = timedelta(seconds=30)
#: Waits between attempts: 5 s, 10 s, 20 s ... at most 30 minutes (each +-20%).
FIRST_RETRY_SECONDS = 5.0
MAX_RETRY_SECONDS = 1800.0
_DELIVERY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")

Changed = Callable[[Delivery], None]
_hooks: dict[str, list[Changed]] = {}


class BadDelivery(ValueError):
    """The caller asked for something that cannot be sent (a bad address, a bad id)."""


# --- what others register --------------------------------------------------------------


def on_change(about_type: str, hook: Changed) -> None:
    """Call ``hook(delivery)`` after commit whenever a delivery about ``about_type``
    is queued or changes state (sent, failed, a retry scheduled): pages that list
    deliveries publish their update from there."""
    _hooks.setdefault(about_type, []).append(hook)


def _changed_on_commit(delivery: Delivery) -> None:
    hooks = _hooks.get(delivery.about_type, [])
    if not hooks:
        return

    def call() -> None:
        for hook in hooks:
            try:
                hook(delivery)
            except Exception:
                log.exception("outbox hook %r failed", hook)

    transaction.on_commit(call)


# --- building messages -------------------------------------------------------------------


def new_delivery_id() -> str:
    return str(uuid.uuid4())


def mail_domain() -> str:
    _, address = parseaddr(settings.AGENTWEB_MAIL_FROM)
    return address.rpartition("@")[2] or "agentweb.invalid"


def message_id(delivery_id: str) -> str:
    """The ``Message-ID`` a mail of this delivery carries (replies name it in
    ``In-Reply-To``)."""
    return f"<{delivery_id}@{mail_domain()}>"


def _one_line(value: str) -> str:
    return " ".join(str(value).split())  # no header injection through CR/LF


def build_email(
    *,
    delivery_id: str,
    to: str,
    subject: str,
    text: str,
    html: str | None = None,
    headers: dict[str, str] | None = None,
) -> str:
    """The whole message as it is sent (CRLF line ends, ASCII: quoted-printable body,
    RFC 2047 headers)."""
    message = EmailMessage(policy=SMTP)
    message["From"] = settings.AGENTWEB_MAIL_FROM
    message["To"] = to
    message["Subject"] = _one_line(subject)[:250]
    message["Date"] = format_datetime(timezone.now())
    message["Message-ID"] = message_id(delivery_id)
    for name, value in (headers or {}).items():
        message[_one_line(name)] = _one_line(value)
    message.set_content(text, cte="quoted-printable")
    if html is not None:
        message.add_alternative(html, subtype="html", cte="quoted-printable")
    return message.as_bytes().decode("ascii")


def json_body(payload: Any) -> str:
    """Compact JSON, UTF-8, no NaN: the bytes a receiver verifies the signature over."""
    return json.dumps(
        payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False, cls=DjangoJSONEncoder
    )


# --- queueing ----------------------------------------------------------------------------


def do_queue_email(
    *,
    to: str,
    subject: str,
    text: str,
    html: str | None = None,
    headers: dict[str, str] | None = None,
    delivery_id: str | None = None,
    to_label: str | None = None,
    topic: str = "",
    about: tuple[str, int] | None = None,
    ordering_key: str = "",
) -> Delivery:
    """Queue a mail to ``to`` (one address). Sent through ``AGENTWEB_SMTP_URL`` after the
    caller's transaction commits; without it the row stays queued, retried, and says why."""
    _, address = parseaddr(to)
    if "@" not in address or any(c in to for c in "\r\n"):
        raise BadDelivery(f"not an email address: {to!r}")
    delivery_id, fresh = _checked_id(delivery_id)
    body = build_email(
        delivery_id=delivery_id, to=to, subject=subject, text=text, html=html, headers=headers
    )
    return _queue(
        channel=Delivery.Channel.EMAIL,
        target=address,
        to_label=to_label or address,
        body=body,
        delivery_id=delivery_id,
        topic=topic,
        about=about,
        ordering_key=ordering_key,
        fresh=fresh,
    )


def do_queue_webhook(
    *,
    url: str,
    payload: dict[str, Any],
    secret: str,
    delivery_id: str | None = None,
    to_label: str | None = None,
    topic: str = "",
    about: tuple[str, int] | None = None,
    ordering_key: str = "",
) -> Delivery:
    """Queue a JSON POST to ``url`` signed with ``secret`` (``X-Agentweb-Timestamp``,
    ``X-Agentweb-Signature``; ``X-Agentweb-Delivery`` carries the delivery id). A
    ``"delivery_id": None`` in ``payload`` is filled in with the delivery's id."""
    return _queue_post(
        Delivery.Channel.WEBHOOK, url, payload, secret, delivery_id, to_label or url, topic,
        about, ordering_key,
    )  # fmt: skip


def do_queue_slack(
    *,
    url: str,
    payload: dict[str, Any],
    delivery_id: str | None = None,
    to_label: str = "Slack",
    topic: str = "",
    about: tuple[str, int] | None = None,
    ordering_key: str = "",
) -> Delivery:
    """Queue a POST of Slack JSON (Block Kit) to an incoming webhook or a
    ``response_url``; the URL is never shown (it is the webhook's secret)."""
    return _queue_post(
        Delivery.Channel.SLACK, url, payload, "", delivery_id, to_label, topic, about,
        ordering_key,
    )  # fmt: skip


def _queue_post(
    channel: str,
    url: str,
    payload: dict[str, Any],
    secret: str,
    delivery_id: str | None,
    to_label: str,
    topic: str,
    about: tuple[str, int] | None,
    ordering_key: str,
) -> Delivery:
    if not url.startswith(("http://", "https://")):
        raise BadDelivery(f"not an http(s) URL: {url[:100]!r}")
    delivery_id, fresh = _checked_id(delivery_id)
    if "delivery_id" in payload and payload["delivery_id"] is None:
        payload = {**payload, "delivery_id": delivery_id}
    try:
        body = json_body(payload)
    except (TypeError, ValueError) as exc:
        raise BadDelivery(f"the payload is not JSON: {exc}") from exc
    return _queue(
        channel=channel,
        target=url,
        to_label=to_label,
        body=body,
        delivery_id=delivery_id,
        topic=topic,
        about=about,
        ordering_key=ordering_key,
        secret=secret,
        fresh=fresh,
    )


def _checked_id(delivery_id: str | None) -> tuple[str, bool]:
    """The delivery id, and whether it was made here (then nobody else has it yet)."""
    if delivery_id is None:
        return new_delivery_id(), True
    if not _DELIVERY_ID.fullmatch(delivery_id):
        raise BadDelivery("a delivery id is 1-100 of A-Z a-z 0-9 . _ - (it is a Message-ID)")
    return delivery_id, False


def _queue(
    *,
    channel: str,
    target: str,
    to_label: str,
    body: str,
    delivery_id: str,
    topic: str,
    about: tuple[str, int] | None,
    ordering_key: str,
    secret: str = "",
    fresh: bool = False,
) -> Delivery:
    """The row, created once per ``delivery_id``: queueing the same id again returns the
    first row unchanged (its bytes stay the ones first stored). ``fresh``: the id was
    made here (a uuid), so it cannot exist yet."""
    now = timezone.now()
    about_type, about_id = about if about is not None else ("", None)
    fields = {
        "channel": channel,
        "target": target,
        "to_label": to_label[:300],
        "body": body,
        "secret": secret,
        "topic": topic[:60],
        "about_type": about_type,
        "about_id": about_id,
        "ordering_key": ordering_key[:300],
        "next_attempt_at": now,
        "give_up_at": now + timedelta(hours=settings.AGENTWEB_DELIVERY_RETRY_HOURS),
        "dispatched_at": now,
    }
    if fresh:  # an id made here: nobody else has it, no look-up first
        delivery, created = Delivery.objects.create(delivery_id=delivery_id, **fields), True
    else:
        with transaction.atomic():
            delivery, created = Delivery.objects.get_or_create(
                delivery_id=delivery_id, defaults=fields
            )
    if created:
        pk, lane = delivery.pk, delivery.lane
        transaction.on_commit(lambda: dispatch(pk, lane))
        _changed_on_commit(delivery)
    return delivery


# --- attempts ------------------------------------------------------------------------------


def dispatch(delivery_pk: int, lane: str) -> None:
    """Wake an attempt: on this process's lane when it is a worker (the delivery was
    queued by a run's step or a task), else through the broker. A broker that cannot be
    reached loses nothing: the sweep finds the row."""
    if lanes.in_worker():  # this process has lanes
        lanes.submit(lane, delivery_pk, attempt_in_lane)
        return
    try:
        queue.send(DELIVER_TASK, delivery_pk, lane)
    except Exception as exc:
        log.warning("delivery %s: could not wake a worker (%s); the sweep will", delivery_pk, exc)
        Delivery.objects.filter(pk=delivery_pk).update(dispatched_at=None)


def attempt_in_lane(delivery_pk: int) -> None:
    """One attempt on a lane's thread, which then gives its database connection back."""
    try:
        do_attempt_delivery(delivery_pk)
    finally:
        connections.close_all()


def _not_blocked() -> Q:
    """No earlier delivery of the same ordering key is still queued."""
    earlier = Delivery.objects.filter(
        ordering_key=OuterRef("ordering_key"), state=Delivery.State.QUEUED, pk__lt=OuterRef("pk")
    )
    return Q(ordering_key="") | Q(~Exists(earlier))


def _claimable(now: Any) -> Any:
    return (
        Delivery.objects.filter(state=Delivery.State.QUEUED, next_attempt_at__lte=now)
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
        .filter(_not_blocked())
    )


def lease() -> timedelta:
    """How long an attempt holds its row: an SMTP exchange is about ten round trips, each
    within the timeout. A worker killed mid-attempt leaves the row to be tried again
    after it (with the same bytes)."""
    return timedelta(seconds=10 * float(settings.AGENTWEB_DELIVERY_TIMEOUT_SECONDS) + 5)


def retry_delay(attempts: int) -> float:
    base = min(FIRST_RETRY_SECONDS * 2 ** max(attempts - 1, 0), MAX_RETRY_SECONDS)
    return base * random.uniform(0.8, 1.2)  # jitter, not a secret


def do_attempt_delivery(delivery_pk: int) -> str | None:
    """Claim the delivery (a conditional UPDATE: due, queued, not held by another attempt,
    not behind an earlier one of its ordering key) and send it once. Returns its state
    afterwards, or None when it was not ours to send."""
    now = timezone.now()
    until = now + lease()
    won = (
        _claimable(now)
        .filter(pk=delivery_pk)
        .update(claimed_until=until, dispatched_at=None, attempts=F("attempts") + 1)
    )
    if not won:
        return None
    delivery = Delivery.objects.get(pk=delivery_pk)
    try:
        SENDERS[delivery.channel](delivery)
    except DeliveryError as exc:
        return _record_failure(delivery, until, exc.reason, exc.permanent)
    except Exception as exc:  # a bug or an odd answer: told, and retried like an error
        log.exception("delivery %s: %s failed", delivery.delivery_id, delivery.channel)
        return _record_failure(delivery, until, f"{type(exc).__name__}: {exc}", False)
    done = timezone.now()
    with transaction.atomic():
        Delivery.objects.filter(pk=delivery.pk, state=Delivery.State.QUEUED).update(
            state=Delivery.State.SENT, sent_at=done, claimed_until=None
        )
        delivery.state, delivery.sent_at, delivery.claimed_until = Delivery.State.SENT, done, None
        _changed_on_commit(delivery)
    log.info(
        "delivery %s: %s to %s sent", delivery.delivery_id, delivery.channel, delivery.to_label
    )
    _wake_next_in_order(delivery)
    return Delivery.State.SENT


def _record_failure(delivery: Delivery, until: Any, reason: str, permanent: bool) -> str:
    now = timezone.now()
    final = permanent or now >= delivery.give_up_at
    if final and not permanent:
        hours = (delivery.give_up_at - delivery.created_at).total_seconds() / 3600
        reason = f"gave up after {delivery.attempts} attempts in {hours:g} h: {reason}"
    update: dict[str, Any] = {"last_error": reason, "claimed_until": None}
    if final:
        update["state"] = Delivery.State.FAILED
    else:
        wait = timedelta(seconds=retry_delay(delivery.attempts))
        update["next_attempt_at"] = min(now + wait, delivery.give_up_at)
    with transaction.atomic():
        # Ours still (a lease that ran out may have let another attempt take over).
        Delivery.objects.filter(
            pk=delivery.pk, state=Delivery.State.QUEUED, claimed_until=until
        ).update(**update)
        for key, value in update.items():
            setattr(delivery, key, value)
        _changed_on_commit(delivery)
    log.warning(
        "delivery %s: %s to %s %s: %s",
        delivery.delivery_id,
        delivery.channel,
        delivery.to_label,
        "failed" if final else f"will be retried (attempt {delivery.attempts})",
        reason,
    )
    if final:
        _wake_next_in_order(delivery)
    return str(update.get("state", Delivery.State.QUEUED))


def _wake_next_in_order(delivery: Delivery) -> None:
    """The next delivery of the same ordering key may go now."""
    if not delivery.ordering_key:
        return
    following = (
        Delivery.objects.filter(ordering_key=delivery.ordering_key, state=Delivery.State.QUEUED)
        .order_by("pk")
        .values_list("pk", "channel", "target")
        .first()
    )
    if following is not None:
        pk, channel, target = following
        dispatch(pk, lane_of(channel, target))


def do_sweep_deliveries(limit: int = 500) -> int:
    """Beat's sweep: deliveries that are due (retries, and ones whose wake-up was lost or
    whose worker died mid-attempt) are tried on this worker's lanes."""
    now = timezone.now()
    due = list(
        _claimable(now)
        .filter(Q(dispatched_at__isnull=True) | Q(dispatched_at__lt=now - DISPATCH_GRACE))
        .order_by("next_attempt_at")
        .values_list("pk", "channel", "target")[:limit]
    )
    if not due:
        return 0
    Delivery.objects.filter(pk__in=[pk for pk, _, _ in due]).update(dispatched_at=now)
    for pk, channel, target in due:
        lanes.submit(lane_of(channel, target), pk, attempt_in_lane)
    return len(due)


# --- reading -------------------------------------------------------------------------------


def deliveries_about(about_type: str, about_id: int) -> list[Delivery]:
    return list(Delivery.objects.filter(about_type=about_type, about_id=about_id).order_by("pk"))


def notifications_about(about_type: str, ids: Iterable[int]) -> dict[int, list[NotificationJson]]:
    """id -> its deliveries as pages and the API list them (one query for many)."""
    wanted = list(ids)
    found: dict[int, list[NotificationJson]] = {pk: [] for pk in wanted}
    rows = Delivery.objects.filter(about_type=about_type, about_id__in=wanted).order_by("pk")
    for delivery in rows:
        if delivery.about_id is not None:
            found.setdefault(delivery.about_id, []).append(delivery.as_notification())
    return found
