"""Provider.post_json builds its requests itself and hands them to the client's transport
(no Client.post per call): what a provider gets on the wire and what comes back is the
same as through httpx's client, over real localhost HTTP."""

import gzip
import json

import pytest

from agentweb.runtime.gateway import ModelHTTPError
from agentweb.runtime.providers import Provider, Wire
from tests.fakes.llm_server import Reply


def _provider(url: str) -> Provider:
    return Provider(name="openai", base_url=url, api_key="k", max_retries=0)


def test_request_carries_client_and_adapter_headers_and_httpx_json(fake_llm):
    fake_llm.enqueue({"ok": 1}, {"ok": 2})
    p = _provider(fake_llm.openai_url)
    body = {"text": "é ☃", "n": [1, 2.5]}
    try:
        first_reply = p.post_json(fake_llm.openai_url + "/x", body, {"Authorization": "Bearer k"})
        second_reply = p.post_json(fake_llm.openai_url + "/x", body, {"User-Agent": "mine"})
    finally:
        p.close()
    assert (first_reply, second_reply) == ({"ok": 1}, {"ok": 2})
    first, second = ({k.lower(): v for k, v in r.headers.items()} for r in fake_llm.requests)
    assert first["authorization"] == "Bearer k"
    assert first["content-type"] == "application/json"
    assert first["user-agent"].startswith("python-httpx/")
    assert "gzip" in first["accept-encoding"]
    assert first["host"] == fake_llm.base_url.removeprefix("http://")
    assert second["user-agent"] == "mine"  # the adapter's header wins over the client's
    assert "authorization" not in second
    assert fake_llm.requests[0].json == body
    # encoded as httpx encodes json=: compact, UTF-8 as it is
    expected = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    assert int(first["content-length"]) == len(expected)


def test_nan_is_refused_before_anything_is_sent(fake_llm):
    p = _provider(fake_llm.openai_url)
    try:
        with pytest.raises(ValueError):
            p.post_json(fake_llm.openai_url + "/x", {"x": float("nan")}, {})
    finally:
        p.close()
    assert fake_llm.requests == []


def test_gzip_reply_is_decoded_and_the_connection_kept(fake_llm):
    packed = gzip.compress(b'{"answer": "zipped"}')
    fake_llm.enqueue(
        Reply(body=packed, headers={"Content-Encoding": "gzip"}),
        {"answer": "plain"},
    )
    p = _provider(fake_llm.openai_url)
    try:
        assert p.post_json(fake_llm.openai_url + "/x", {}, {}) == {"answer": "zipped"}
        assert p.post_json(fake_llm.openai_url + "/x", {}, {}) == {"answer": "plain"}
    finally:
        p.close()
    assert fake_llm.requests[0].peer == fake_llm.requests[1].peer  # kept alive, reused


def test_redirects_are_not_followed_and_cookies_not_kept(fake_llm):
    fake_llm.enqueue(
        Reply(json={"ok": True}, headers={"Set-Cookie": "session=abc; Path=/"}),
        Reply(status=302, json={}, headers={"Location": "/elsewhere"}),
    )
    p = _provider(fake_llm.openai_url)
    try:
        p.post_json(fake_llm.openai_url + "/x", {}, {})
        with pytest.raises(ModelHTTPError) as err:
            p.post_json(fake_llm.openai_url + "/x", {}, {})
    finally:
        p.close()
    assert err.value.status == 302
    assert len(fake_llm.requests) == 2  # the Location was not asked for
    assert "cookie" not in {k.lower() for k in fake_llm.requests[1].headers}


def test_wire_parts_are_written_once_and_the_body_is_the_same_text(fake_llm, monkeypatch):
    """A run's history and tools are ``Wire`` parts: their JSON is made at their first
    request and kept; every body is still the text json.dumps makes of it."""
    from agentweb.runtime import providers

    encoded: list[object] = []
    real = providers._ENCODE_BODY

    def counting(value: object) -> str:
        encoded.append(value)
        return real(value)

    monkeypatch.setattr(providers, "_ENCODE_BODY", counting)
    system = Wire(role="system", content='Stay kind ☃ \u2028 "quoted" \\ é')
    tool = Wire(type="function", function={"name": "t", "parameters": {"x": [1, 2.5, None]}})
    fresh = {"role": "user", "content": "not kept"}
    fake_llm.enqueue({"ok": 1}, {"ok": 2}, {"ok": 3})
    p = _provider(fake_llm.openai_url)
    bodies = [
        {"model": "m", "messages": [system, fresh], "tools": [tool], "stream": True},
        {"model": "m", "messages": [system, fresh, Wire(role="assistant", content="")]},
        {"model": "m", "messages": [fresh, system], "tools": [], "n": [1, 2]},
    ]
    try:
        for body in bodies:
            p.post_json(fake_llm.openai_url + "/x", body, {})
    finally:
        p.close()
    for body, request in zip(bodies, fake_llm.requests, strict=True):
        assert request.json == body
        sent = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        assert int(request.headers["Content-Length"]) == len(sent)
    assert sum(1 for v in encoded if v is system) == 1  # once, for three bodies
    assert sum(1 for v in encoded if v is tool) == 1
    assert sum(1 for v in encoded if v is fresh) == 3  # not a Wire: written every time
    with pytest.raises(ValueError, match="JSON compliant"):  # NaN in a kept part: refused
        p._encode({"messages": [Wire(role="user", content=float("nan"))]})
