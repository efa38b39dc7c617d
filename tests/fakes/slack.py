"""Playing Slack: a button click as Slack's interaction callback sends it.

Slack POSTs ``application/x-www-form-urlencoded`` with one field, ``payload``, holding the
``block_actions`` JSON, and signs it: ``X-Slack-Request-Timestamp`` (unix seconds) and
``X-Slack-Signature: v0=<hex HMAC-SHA256 of "v0:<timestamp>:<raw body>">`` with the app's
signing secret (api.slack.com/authentication/verifying-requests-from-slack). The message's
own blocks come back in ``message``; the click answers through ``response_url``.
"""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import urlencode

from agentweb.signing import slack_signature


def block_actions(
    *,
    user_id: str,
    action_id: str,
    value: str,
    response_url: str,
    message: dict[str, Any] | None = None,
    username: str = "someone",
) -> dict[str, Any]:
    """A ``block_actions`` payload shaped as Slack sends it (fields we do not read too)."""
    now = f"{time.time():.6f}"
    return {
        "type": "block_actions",
        "user": {"id": user_id, "username": username, "name": username, "team_id": "T0TEST"},
        "api_app_id": "A0TEST",
        "token": "verification-token-is-deprecated",
        "container": {
            "type": "message",
            "message_ts": now,
            "channel_id": "C0APPROVALS",
            "is_ephemeral": False,
        },
        "trigger_id": "1234.5678.abcdef",
        "team": {"id": "T0TEST", "domain": "example"},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": "C0APPROVALS", "name": "approvals"},
        "message": message or {"type": "message", "text": "", "ts": now, "blocks": []},
        "state": {"values": {}},
        "response_url": response_url,
        "actions": [
            {
                "action_id": action_id,
                "block_id": "approval",
                "text": {"type": "plain_text", "text": "Approve", "emoji": True},
                "value": value,
                "style": "primary",
                "type": "button",
                "action_ts": now,
            }
        ],
    }


def signed(
    secret: str, payload: dict[str, Any], *, timestamp: int | None = None
) -> tuple[bytes, dict[str, str]]:
    """The raw body and headers of Slack's POST."""
    body = urlencode({"payload": json.dumps(payload)}).encode()
    ts = str(int(time.time()) if timestamp is None else timestamp)
    return body, {
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": slack_signature(secret, ts, body),
    }


def button(message: dict[str, Any], action_id: str) -> dict[str, Any]:
    """The button ``action_id`` of a message we posted (to click it as a person would)."""
    for block in message.get("blocks", []):
        if block.get("type") == "actions":
            for element in block["elements"]:
                if element.get("action_id") == action_id:
                    return element
    raise AssertionError(f"no button {action_id} in the message")
