"""Signed webhooks: ``POST /hooks/tickets/<source name>`` (DESIGN §11).

Order of checks, each answered in JSON: the source (404), the signature over the raw body
and its timestamp within 300 s (401), the payload (422 naming ``error.field``), then the
delivery: its id is recorded in the transaction that applies it, first, so a replay (also
one arriving at the same moment) is 200 and changes nothing, and a refused delivery leaves
no row and its id free. Accepted: 202 ``{"ticket": id}``.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from agentweb import signing
from agentweb.middleware import BadInput, strict_json
from agentweb.tickets import actions
from agentweb.tickets.api_input import InvalidTicket
from agentweb.tickets.hook_input import GenericHook, HookEvent, ZendeskHook
from agentweb.tickets.models import Message, Source, WebhookDelivery

log = logging.getLogger(__name__)

ZENDESK_INVOCATION = "X-Zendesk-Webhook-Invocation-Id"


def _error(status: int, code: str, message: str, field: str | None = None) -> JsonResponse:
    body: dict[str, Any] = {"code": code, "message": message}
    if field is not None:
        body["field"] = field
    return JsonResponse({"error": body}, status=status)


@csrf_exempt
def ticket_hook(request: HttpRequest, source_name: str) -> HttpResponse:
    if request.method != "POST":
        response = _error(405, "method_not_allowed", "use POST")
        response["Allow"] = "POST"
        return response
    source = Source.objects.filter(name=source_name, enabled=True).first()
    if source is None:
        return _error(404, "unknown_source", f"no ticket source named {source_name[:64]!r}")
    raw = request.body
    try:
        if source.kind == Source.Kind.ZENDESK:
            signing.verify_zendesk(
                source.secret,
                raw,
                request.headers.get(signing.ZENDESK_TIMESTAMP),
                request.headers.get(signing.ZENDESK_SIGNATURE),
            )
        else:
            signing.verify_agentweb(
                source.secret,
                raw,
                request.headers.get(signing.AGENTWEB_TIMESTAMP),
                request.headers.get(signing.AGENTWEB_SIGNATURE),
            )
    except signing.BadSignature as exc:
        log.warning("refused a delivery to source %s: %s", source.name, exc)
        return _error(401, "bad_signature", str(exc))
    try:
        event = _event_of(source, request, raw)
    except InvalidTicket as exc:
        log.info("refused a delivery to source %s: %s", source.name, exc.message)
        return _error(422, exc.code, exc.message, exc.field)
    return _apply(source, event)


def _event_of(source: Source, request: HttpRequest, raw: bytes) -> HookEvent:
    try:
        data = strict_json(raw)
    except BadInput as exc:
        raise InvalidTicket(f"body: {exc}", "body") from None
    if not isinstance(data, dict):
        raise InvalidTicket("body: must be a JSON object", "body")
    if source.kind == Source.Kind.ZENDESK:
        delivery_id = (request.headers.get(ZENDESK_INVOCATION) or "").strip()
        if not delivery_id or len(delivery_id) > 200:
            raise InvalidTicket(f"{ZENDESK_INVOCATION} is missing", ZENDESK_INVOCATION)
        event = ZendeskHook.event_of(source.name, data, delivery_id)
        _drop_our_own_echo(source, event)
        return event
    return GenericHook.event_of(source.name, data)


def _drop_our_own_echo(source: Source, event: HookEvent) -> None:
    """A reply we posted into the helpdesk comes back as its latest comment on the next
    update: that text is ours, not the customer's."""
    text = event.incoming.body.strip()
    if (
        text
        and Message.objects.filter(
            ticket__source=source.name,
            ticket__external_id=event.incoming.external_id,
            direction=Message.Direction.OUT,
            body__startswith=text[:200],
        ).exists()
    ):
        event.incoming.body = ""


def _apply(source: Source, event: HookEvent) -> JsonResponse:
    try:
        with transaction.atomic():
            # First: a second delivery with this id waits here for the first to commit,
            # then fails on the unique index, and its whole transaction goes.
            record = WebhookDelivery.objects.create(
                source=source, delivery_id=event.delivery_id, event=event.event
            )
            received = actions.do_receive_ticket(event.incoming, update=event.update)
            WebhookDelivery.objects.filter(pk=record.pk).update(ticket=received.ticket)
    except IntegrityError:
        earlier = WebhookDelivery.objects.filter(
            source=source, delivery_id=event.delivery_id
        ).first()
        if earlier is None:  # not the delivery id after all: a real error
            raise
        return JsonResponse({"ticket": earlier.ticket_id, "replayed": True}, status=200)
    return JsonResponse({"ticket": received.ticket.pk}, status=202)
