"""The three webhook signature schemes: what a correct sender produces verifies, and every
way a delivery can be wrong (body, secret, age, header shape) is refused with a reason."""

import base64
import hashlib
import hmac
import time

import pytest

from agentweb import signing
from agentweb.signing import BadSignature

BODY = b'{"event": "ticket.created", "delivery_id": "d1"}'


def test_it_verifies_our_own_headers_and_refuses_a_changed_body_or_secret():
    h = signing.agentweb_headers("s3cret", BODY)
    ts, sig = h[signing.AGENTWEB_TIMESTAMP], h[signing.AGENTWEB_SIGNATURE]
    # the documented construction, computed independently
    want = hmac.new(b"s3cret", ts.encode() + b"." + BODY, hashlib.sha256).hexdigest()
    assert sig == f"sha256={want}"
    signing.verify_agentweb("s3cret", BODY, ts, sig)
    with pytest.raises(BadSignature, match="does not match"):
        signing.verify_agentweb("s3cret", BODY + b" ", ts, sig)
    with pytest.raises(BadSignature, match="does not match"):
        signing.verify_agentweb("other", BODY, ts, sig)
    with pytest.raises(BadSignature, match="does not match"):
        signing.verify_agentweb("s3cret", BODY, str(int(ts) + 1), sig)


@pytest.mark.parametrize(
    ("ts", "sig", "reason"),
    [
        (None, "sha256=00", "Timestamp is missing"),
        ("", "sha256=00", "Timestamp is missing"),
        ("12ab", "sha256=00", "not unix seconds"),
        ("１２３", "sha256=00", "not unix seconds"),
        ("9" * 40, "sha256=00", "not unix seconds"),
        ("NOW", None, "not unix seconds"),
        ("TS", None, "Signature is missing"),
        ("TS", "md5=abc", "must be sha256"),
        ("TS", "sha256=", "must be sha256"),
    ],
)
def test_it_refuses_malformed_headers_with_a_reason(ts, sig, reason):
    now = str(int(time.time()))
    ts = now if ts == "TS" else ts
    with pytest.raises(BadSignature, match=reason):
        signing.verify_agentweb("s", BODY, ts, sig)


def test_it_refuses_a_correct_signature_more_than_300_s_old_or_ahead():
    now = time.time()
    for offset in (-301, 301):
        h = signing.agentweb_headers("s", BODY, now=now + offset)
        with pytest.raises(BadSignature, match="300 s"):
            signing.verify_agentweb(
                "s", BODY, h[signing.AGENTWEB_TIMESTAMP], h[signing.AGENTWEB_SIGNATURE], now=now
            )
    h = signing.agentweb_headers("s", BODY, now=now - 299)
    signing.verify_agentweb(
        "s", BODY, h[signing.AGENTWEB_TIMESTAMP], h[signing.AGENTWEB_SIGNATURE], now=now
    )


def test_it_verifies_zendesk_as_zendesk_signs():
    ts = "2026-12-01T21:40:00Z"
    mac = hmac.new(b"zk", ts.encode() + BODY, hashlib.sha256).digest()
    sig = base64.b64encode(mac).decode()
    now = 1_796_161_200.0  # 2026-12-01T21:40:00Z
    signing.verify_zendesk("zk", BODY, ts, sig, now=now)
    with pytest.raises(BadSignature, match="300 s"):
        signing.verify_zendesk("zk", BODY, ts, sig, now=now + 400)
    with pytest.raises(BadSignature, match="does not match"):
        signing.verify_zendesk("zk", BODY + b"x", ts, sig, now=now)
    bad_ts = "yesterday"
    sig2 = signing.zendesk_signature("zk", bad_ts, BODY)
    with pytest.raises(BadSignature, match="ISO 8601"):
        signing.verify_zendesk("zk", BODY, bad_ts, sig2, now=now)
    with pytest.raises(BadSignature, match="missing"):
        signing.verify_zendesk("zk", BODY, None, sig, now=now)


def test_it_verifies_slack_v0_as_slack_documents_it():
    ts = str(int(time.time()))
    body = b"payload=%7B%22type%22%3A%22block_actions%22%7D"
    mac = hmac.new(b"sl", b"v0:" + ts.encode() + b":" + body, hashlib.sha256).hexdigest()
    signing.verify_slack("sl", body, ts, f"v0={mac}")
    with pytest.raises(BadSignature, match="does not match"):
        signing.verify_slack("sl", body, ts, f"v1={mac}")
    with pytest.raises(BadSignature, match="300 s"):
        signing.verify_slack("sl", body, str(int(ts) - 301), slack_sig("sl", int(ts) - 301, body))


def slack_sig(secret: str, ts: int, body: bytes) -> str:
    return signing.slack_signature(secret, str(ts), body)
