"""The approval as a mail and as a Slack message. Model and tool text is untrusted: the
HTML mail escapes it (Django's autoescape), Slack gets it as plain text or escaped
mrkdwn (``&``, ``<``, ``>``: Slack's own rule), and nothing of it is a header."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.template.loader import render_to_string
from django.utils import timezone

from agentweb.notify.cards import ApprovalCard

APPROVE, REJECT = "agentweb_approve", "agentweb_reject"
HEADINGS = {
    "requested": "needs your decision",
    "escalated": "is escalated to you (nobody decided it yet)",
    "reminder": "still waits for a decision",
}


@dataclass(frozen=True)
class Mail:
    subject: str
    text: str
    html: str


def _left(card: ApprovalCard) -> str:
    seconds = (card.expires_at - timezone.now()).total_seconds()
    if seconds <= 0:
        return "expired"
    minutes = round(seconds / 60)
    if minutes < 90:
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    hours = round(seconds / 3600)
    return f"{hours} hours"


def approval_mail(card: ApprovalCard, link: str, purpose: str) -> Mail:
    heading = HEADINGS.get(purpose, HEADINGS["requested"])
    left = _left(card)
    subject = {
        "escalated": f"Escalated: {card.tool} on run #{card.run_id}, nobody decided yet",
        "reminder": f"Reminder: {card.tool} on run #{card.run_id} expires in {left}",
    }.get(purpose, f"Decision needed: {card.tool} on run #{card.run_id}")
    context = {"card": card, "link": link, "purpose": purpose, "heading": heading,
               "left": left}  # fmt: skip
    return Mail(
        subject=subject,
        text=render_to_string("notify/approval_mail.txt", context),
        html=render_to_string("notify/approval_mail.html", context),
    )


# --- Slack ---------------------------------------------------------------------------


def escape(text: str) -> str:
    """Slack's mrkdwn escaping: the three characters that make links and mentions."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def button_value(approval_id: int, arguments_hash: str) -> str:
    """What a button carries back: the approval and the arguments it was shown with."""
    return json.dumps({"approval": approval_id, "hash": arguments_hash[:16]})


def read_button_value(value: str) -> tuple[int, str] | None:
    try:
        data = json.loads(value)
        approval, digest = data["approval"], data["hash"]
    except (ValueError, TypeError, KeyError):
        return None
    if not isinstance(approval, int) or isinstance(approval, bool) or not isinstance(digest, str):
        return None
    return approval, digest


def _details(card: ApprovalCard) -> list[dict[str, Any]]:
    arguments = "\n".join(f"{name}: {value}" for name, value in card.arguments) or "(none)"
    lines = [f"*Why a person:* {escape(card.why)}"]
    if card.rule != card.why:
        lines.append(f"*Rule:* {escape(card.rule)}")
    if card.total_line:
        lines.append(f"*{escape(card.total_line)}*")
    lines.append(f"*Risk:* {escape(card.risk)}")
    if card.progress:
        lines.append(f"*Approvals:* {card.progress}")
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": _cut("\n".join(lines), 2900)}},
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": _cut(f"```{escape(arguments)}```", 2900)},
        },
        {
            "type": "context",
            "elements": [
                {
                    "type": "mrkdwn",
                    "text": _cut(
                        f"<{card.run_url}|Run #{card.run_id}> · {escape(card.agent)} · started "
                        f"by {escape(card.starter)} · task: {escape(card.task)}",
                        2900,
                    ),
                }
            ],
        },
    ]


def _header(text: str) -> dict[str, Any]:
    return {"type": "header", "text": {"type": "plain_text", "text": _cut(text, 150)}}


def slack_request(card: ApprovalCard, arguments_hash: str, purpose: str) -> dict[str, Any]:
    heading = HEADINGS.get(purpose, HEADINGS["requested"])
    title = f"{card.tool} {heading}"
    value = button_value(card.approval_id, arguments_hash)
    buttons = {
        "type": "actions",
        "block_id": f"approval-{card.approval_id}",
        "elements": [
            {
                "type": "button",
                "action_id": APPROVE,
                "style": "primary",
                "text": {"type": "plain_text", "text": "Approve"},
                "value": value,
                "confirm": {
                    "title": {"type": "plain_text", "text": "Approve this call?"},
                    "text": {"type": "plain_text", "text": _cut(f"{card.tool}: {card.why}", 300)},
                    "confirm": {"type": "plain_text", "text": "Approve"},
                    "deny": {"type": "plain_text", "text": "Cancel"},
                },
            },
            {
                "type": "button",
                "action_id": REJECT,
                "style": "danger",
                "text": {"type": "plain_text", "text": "Reject"},
                "value": value,
            },
            {
                "type": "button",
                "action_id": "agentweb_open",
                "text": {"type": "plain_text", "text": "Open in agentweb"},
                "url": card.approval_url,
            },
        ],
    }
    return {
        "text": _cut(f"{title} (run #{card.run_id}): {card.why}", 300),
        "blocks": [_header(title), *_details(card), buttons],
    }


def slack_decided(
    card: ApprovalCard, outcome: str, *, keep_buttons: dict[str, Any] | None
) -> dict[str, Any]:
    """The message as it reads after a decision (``replace_original``): who decided what;
    while a quorum is still open the buttons stay (``keep_buttons``)."""
    blocks = [_header(f"{card.tool}: {outcome}"), *_details(card)]
    if keep_buttons is not None:
        blocks.append(keep_buttons)
    return {
        "replace_original": True,
        "text": _cut(f"{card.tool} (run #{card.run_id}): {outcome}", 300),
        "blocks": blocks,
    }


def slack_ephemeral(text: str) -> dict[str, Any]:
    return {"response_type": "ephemeral", "replace_original": False, "text": _cut(text, 2000)}
