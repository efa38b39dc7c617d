"""A model call ends at once when its caller cancels it, and has an overall deadline;
the connection to the provider is closed (the fake server sees the hang-up)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from agentweb.runtime.gateway import ModelCancelled, ModelTimeout, guarded_call
from agentweb.runtime.messages import UserMessage
from agentweb.runtime.openai import OpenAIChatModel
from agentweb.runtime.providers import Provider
from tests.fakes.llm_server import FakeLLMServer, Reply, oa_reply, oa_text_chunks


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as s:
        yield s


def model(server: FakeLLMServer) -> OpenAIChatModel:
    return OpenAIChatModel("m", Provider(name="openai", base_url=server.openai_url, max_retries=0))


def trickle(tokens: int = 30) -> Reply:
    return Reply(sse=oa_text_chunks("x" * tokens, size=1), interval=2.0)


def cancel_after(seconds: float) -> threading.Event:
    flag = threading.Event()
    threading.Timer(seconds, flag.set).start()
    return flag


def wait_disconnect(server: FakeLLMServer) -> None:
    end = time.monotonic() + 3
    while server.disconnects == 0 and time.monotonic() < end:
        time.sleep(0.02)
    assert server.disconnects == 1


def test_cancel_ends_a_trickling_stream_and_closes_the_connection(server) -> None:
    server.enqueue(trickle())
    flag = cancel_after(1.0)
    began = time.monotonic()
    with pytest.raises(ModelCancelled), guarded_call(cancel=flag.is_set, deadline=120):
        model(server).stream([UserMessage(content="hi")], [], timeout=60)
    assert time.monotonic() - began < 2.0
    wait_disconnect(server)


def test_cancel_ends_a_blocking_call_waiting_for_headers(server) -> None:
    server.enqueue(Reply(delay=30, json=oa_reply(content="late")))
    flag = cancel_after(0.5)
    began = time.monotonic()
    with pytest.raises(ModelCancelled), guarded_call(cancel=flag.is_set):
        model(server).complete([UserMessage(content="hi")], [], timeout=60)
    assert time.monotonic() - began < 1.5
    wait_disconnect(server)


def test_the_overall_deadline_ends_a_stream_that_never_stalls_long(server) -> None:
    # every token arrives well within the read timeout, yet the reply as a whole is late
    server.enqueue(Reply(sse=oa_text_chunks("y" * 30, size=1), interval=0.3))
    began = time.monotonic()
    with pytest.raises(ModelTimeout, match="deadline of 1 s"), guarded_call(deadline=1):
        model(server).stream([UserMessage(content="hi")], [], timeout=5)
    assert time.monotonic() - began < 2.0


def test_without_a_guard_calls_are_unchanged(server) -> None:
    server.enqueue(Reply(delay=0.6, json=oa_reply(content="fine")))
    assert model(server).complete([UserMessage(content="hi")], []).message.content == "fine"


def test_cancel_ends_the_wait_before_a_retry(server) -> None:
    server.enqueue(Reply(status=503, json={"error": {"message": "busy"}}), oa_reply("late"))
    provider = Provider(
        name="openai", base_url=server.openai_url, max_retries=3, backoff=30, backoff_max=30
    )
    # The cancel shows from 0.5 s to 3 s only: the 503 is in by then and the call waits
    # 15-30 s to retry. A wait that did not look at it would retry and get "late".
    began = time.monotonic()

    def cancel() -> bool:
        return 0.5 <= time.monotonic() - began < 3.0

    with pytest.raises(ModelCancelled), guarded_call(cancel=cancel):
        OpenAIChatModel("m", provider).complete([UserMessage(content="hi")], [])
    assert len(server.requests) == 1
