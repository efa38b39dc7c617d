"""Signatures on webhook bodies: ours (tickets in, replies and notifications out, DESIGN
§11/§12), Zendesk's (tickets in) and Slack's v0 (interaction callbacks).

Every scheme signs the raw body together with a timestamp, so a verifier checks both the
bytes it received and their age. ``verify_*`` raise ``BadSignature`` with a reason that
may be shown to the sender (it names what was wrong, never the expected value).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from datetime import datetime

MAX_SKEW_SECONDS = 300

# Header names, as senders and receivers spell them.
AGENTWEB_TIMESTAMP = "X-Agentweb-Timestamp"
AGENTWEB_SIGNATURE = "X-Agentweb-Signature"
ZENDESK_TIMESTAMP = "X-Zendesk-Webhook-Signature-Timestamp"
ZENDESK_SIGNATURE = "X-Zendesk-Webhook-Signature"
SLACK_TIMESTAMP = "X-Slack-Request-Timestamp"
SLACK_SIGNATURE = "X-Slack-Signature"


class BadSignature(Exception):
    """The signature or its timestamp is missing, malformed, too old or wrong."""


def _key(secret: str | bytes) -> bytes:
    return secret.encode() if isinstance(secret, str) else secret


def _mac(secret: str | bytes, message: bytes) -> bytes:
    return hmac.new(_key(secret), message, hashlib.sha256).digest()


def _check_age(seconds: float, now: float | None) -> None:
    if abs((time.time() if now is None else now) - seconds) > MAX_SKEW_SECONDS:
        raise BadSignature(f"timestamp is more than {MAX_SKEW_SECONDS} s away from now")


def _unix_seconds(value: str | None, header: str) -> int:
    if not value:
        raise BadSignature(f"{header} is missing")
    if not value.isascii() or not value.isdigit() or len(value) > 12:
        raise BadSignature(f"{header} is not unix seconds")
    return int(value)


# ours: X-Agentweb-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<raw body>">


def agentweb_headers(secret: str | bytes, body: bytes, now: float | None = None) -> dict[str, str]:
    """The two headers that sign ``body`` for a receiver holding ``secret``."""
    ts = str(int(time.time() if now is None else now))
    mac = _mac(secret, ts.encode() + b"." + body).hex()
    return {AGENTWEB_TIMESTAMP: ts, AGENTWEB_SIGNATURE: f"sha256={mac}"}


def verify_agentweb(
    secret: str | bytes,
    body: bytes,
    timestamp: str | None,
    signature: str | None,
    now: float | None = None,
) -> None:
    ts = _unix_seconds(timestamp, AGENTWEB_TIMESTAMP)
    if not signature:
        raise BadSignature(f"{AGENTWEB_SIGNATURE} is missing")
    scheme, _, given = signature.partition("=")
    if scheme != "sha256" or not given:
        raise BadSignature(f"{AGENTWEB_SIGNATURE} must be sha256=<hex>")
    expected = _mac(secret, timestamp.encode() + b"." + body).hex()  # type: ignore[union-attr]
    if not hmac.compare_digest(given.strip().lower(), expected):
        raise BadSignature("signature does not match the body")
    _check_age(ts, now)


# Zendesk: base64(HMAC-SHA256(secret, timestamp + body)), the timestamp in ISO 8601.


def zendesk_signature(secret: str | bytes, timestamp: str, body: bytes) -> str:
    return base64.b64encode(_mac(secret, timestamp.encode() + body)).decode()


def verify_zendesk(
    secret: str | bytes,
    body: bytes,
    timestamp: str | None,
    signature: str | None,
    now: float | None = None,
) -> None:
    if not timestamp:
        raise BadSignature(f"{ZENDESK_TIMESTAMP} is missing")
    if not signature:
        raise BadSignature(f"{ZENDESK_SIGNATURE} is missing")
    expected = zendesk_signature(secret, timestamp, body)
    if not hmac.compare_digest(signature.strip(), expected):
        raise BadSignature("signature does not match the body")
    try:
        at = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        raise BadSignature(f"{ZENDESK_TIMESTAMP} is not an ISO 8601 time") from None
    if at.tzinfo is None:
        raise BadSignature(f"{ZENDESK_TIMESTAMP} has no time zone")
    _check_age(at.timestamp(), now)


# Slack v0: X-Slack-Signature = "v0=" + hex(HMAC-SHA256(secret, "v0:<timestamp>:<body>")).


def slack_signature(secret: str | bytes, timestamp: str, body: bytes) -> str:
    return "v0=" + _mac(secret, b"v0:" + timestamp.encode() + b":" + body).hex()


def verify_slack(
    secret: str | bytes,
    body: bytes,
    timestamp: str | None,
    signature: str | None,
    now: float | None = None,
) -> None:
    ts = _unix_seconds(timestamp, SLACK_TIMESTAMP)
    if not signature:
        raise BadSignature(f"{SLACK_SIGNATURE} is missing")
    expected = slack_signature(secret, timestamp, body)  # type: ignore[arg-type]
    if not hmac.compare_digest(signature.strip(), expected):
        raise BadSignature("signature does not match the body")
    _check_age(ts, now)
