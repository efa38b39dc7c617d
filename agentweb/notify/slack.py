"""A click on an approval's Slack button (``POST /hooks/slack/interactions``, verified by
the view): the same decision as anywhere else, answered through the interaction's
``response_url`` (the message replaced with who decided what, or an ephemeral refusal)."""

from __future__ import annotations

import logging
from typing import Any

from agentweb.notify import actions as notify
from agentweb.notify.cards import approval_card
from agentweb.notify.messages import (
    APPROVE,
    REJECT,
    read_button_value,
    slack_decided,
    slack_ephemeral,
    slack_request,
)
from agentweb.outbox import actions as outbox
from agentweb.runs import actions as runs
from agentweb.runs.models import Approval, arguments_hash

log = logging.getLogger(__name__)

RESPONSE = "slackresponse"  # deliveries answering an interaction: ("slackresponse", approval)


class Ignored(Exception):
    """An interaction that is not ours to answer (another app's button, a view closed)."""


_WORDS = {2: "two", 3: "three", 4: "four", 5: "five"}


def _respond(response_url: str, payload: dict[str, Any], approval_id: int | None) -> None:
    if not response_url.startswith(("https://", "http://")):
        log.warning("Slack interaction without a usable response_url; answer dropped")
        return
    outbox.do_queue_slack(
        url=response_url,
        payload=payload,
        to_label="Slack (response)",
        topic="slack.response",
        about=(RESPONSE, approval_id or 0),
    )


def handle_interaction(payload: dict[str, Any]) -> str:
    """Decide from a ``block_actions`` payload; returns what happened in words (for the
    log and the tests). Refusals go back as ephemeral messages and decide nothing."""
    if payload.get("type") != "block_actions":
        raise Ignored(f"interaction type {payload.get('type')!r}")
    actions = payload.get("actions")
    if not isinstance(actions, list) or not actions or not isinstance(actions[0], dict):
        raise Ignored("no action")
    action = actions[0]
    action_id = action.get("action_id")
    if action_id not in (APPROVE, REJECT):
        raise Ignored(f"action {action_id!r}")
    response_url = str(payload.get("response_url") or "")
    user_info = payload.get("user") if isinstance(payload.get("user"), dict) else {}
    slack_id = str((user_info or {}).get("id") or "")
    parsed = read_button_value(str(action.get("value") or ""))
    if parsed is None:
        _respond(response_url, slack_ephemeral("This button does not name an approval."), None)
        return "refused: no approval in the button"
    approval_id, digest = parsed

    def refuse(text: str) -> str:
        _respond(response_url, slack_ephemeral(text), approval_id)
        return f"refused: {text}"

    user = notify.slack_user(slack_id)
    if user is None:
        return refuse(
            f"Your Slack account ({slack_id or 'unknown'}) is not linked to an agentweb user, "
            "so nothing was decided. Ask an admin to add it (AGENTWEB_SLACK_USERS, or the "
            "Slack id on your user in the admin)."
        )
    approval = Approval.objects.select_related("run__agent", "run__created_by").filter(
        pk=approval_id
    )
    found = approval.first()
    if found is None:
        return refuse(f"Approval {approval_id} does not exist (any more).")
    if not digest or not arguments_hash(found.proposal).startswith(digest):
        return refuse("This request changed since the message was posted; decide it in agentweb.")
    decision = "approve" if action_id == APPROVE else "reject"
    comment = "" if decision == "approve" else f"Rejected in Slack by {user.get_username()}."
    try:
        decided = runs.do_decide_approval(
            approval_id=approval_id, user=user, decision=decision, comment=comment
        )
    except runs.ActionError as exc:
        return refuse(f"Nothing was decided: {exc.message}.")
    decided = Approval.objects.select_related("run__agent", "run__created_by", "decided_by").get(
        pk=decided.pk
    )
    needed, given = notify.quorum(decided)
    card = approval_card(decided, needed=needed, given=given)
    who = user.get_username()
    if decided.status == Approval.Status.PENDING:  # a quorum still gathering
        more = needed - given
        people = "one more person" if more == 1 else f"{_WORDS.get(more, more)} more people"
        outcome = f"approved by {who} ({given} of {needed}), {people} needed"
        digest_now = arguments_hash(decided.proposal)
        buttons = slack_request(card, digest_now, "requested")["blocks"][-1]
        _respond(response_url, slack_decided(card, outcome, keep_buttons=buttons), approval_id)
    else:
        outcome = f"{decided.status} by {who}"
        _respond(response_url, slack_decided(card, outcome, keep_buttons=None), approval_id)
    return outcome
