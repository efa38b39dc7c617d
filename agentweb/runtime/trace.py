"""What each model call was sent, for the trace (DESIGN §16): the messages and the tool
specs exactly as the context policy gave them to the model.

Stored in ``model_called`` under ``sent`` so that every message is stored once per run,
not once per call (the record grows with the run, not with its square):

``new``
    the messages the run's record (``state.messages``) gained since the last recorded
    call, starting at position ``from`` (images by reference: their bytes never);
``window``
    what this call was sent, in order: a position ``i`` of the record, a range
    ``[a, b]`` of positions (both included), or ``{"made": k}``: the ``k``-th message
    of the run the context policy made instead of one of the record (its memory
    message, a digested tool result), which are not in the record;
``made``
    those messages first made for this call, in full (one sent again is referred to);
``tools``
    the tool specs offered, when they differ from the previous call's (absent: the
    same as before).

``resolve`` turns a run's ``sent`` records back into each call's messages. Which
messages were recorded and the last specs' fingerprint live in ``state.memory["trace"]``
(plain JSON), so a run resumed in another process goes on where it was.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .gateway import ToolSpec
from .messages import Message

__all__ = ["TRACE_KEY", "message_json", "record_sent", "resolve", "sent_count", "spec_json"]

TRACE_KEY = "trace"


def message_json(message: Message) -> dict[str, Any]:
    data = message.model_dump(mode="json", exclude_defaults=True)
    data["role"] = message.role
    attachments = data.get("attachments")
    if attachments:  # the image's reference and size, never its bytes
        data["attachments"] = [{k: v for k, v in a.items() if k != "data"} for a in attachments]
    return data


def spec_json(spec: ToolSpec) -> dict[str, Any]:
    return {"name": spec.name, "description": spec.description, "parameters": spec.parameters}


def record_sent(
    memory: Mapping[str, Any],
    record: Sequence[Message],
    sent: Sequence[Message],
    tools: Sequence[ToolSpec],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``sent`` entry of a model call that was given ``sent`` and ``tools`` while the
    run's record was ``record``, and what ``memory[TRACE_KEY]`` holds once that entry is
    stored (the caller sets it with the event: a call that never answered records
    nothing)."""
    trace = memory.get(TRACE_KEY)
    trace = trace if isinstance(trace, Mapping) else {}
    recorded = trace.get("recorded")
    start = recorded if isinstance(recorded, int) and 0 <= recorded <= len(record) else 0
    out: dict[str, Any] = {"from": start, "new": [message_json(m) for m in record[start:]]}
    positions = {id(m): i for i, m in enumerate(record)}
    known = trace.get("made")
    made: list[str] = list(known) if isinstance(known, list) else []
    made_at = {key: k for k, key in enumerate(made)}
    made_new: list[dict[str, Any]] = []
    window: list[Any] = []
    for message in sent:
        at = positions.get(id(message))
        if at is None:
            data = message_json(message)
            key = _fingerprint(data)
            if key not in made_at:
                made_at[key] = len(made)
                made.append(key)
                made_new.append(data)
            window.append({"made": made_at[key]})
            continue
        last = window[-1] if window else None
        if isinstance(last, int) and last + 1 == at:
            window[-1] = [last, at]
        elif isinstance(last, list) and last[1] + 1 == at:
            last[1] = at
        else:
            window.append(at)
    out["window"] = window
    if made_new:
        out["made"] = made_new
    fingerprint, specs = _specs(tools)
    if fingerprint != trace.get("tools"):
        out["tools"] = specs
    return out, {"recorded": len(record), "tools": fingerprint, "made": made}


# The last tool lists seen, by their specs' identities (a registry hands out the same
# ToolSpec objects call after call): their fingerprint and JSON, made once.
_SPECS: dict[tuple[int, ...], tuple[Sequence[ToolSpec], str, list[dict[str, Any]]]] = {}


def _specs(tools: Sequence[ToolSpec]) -> tuple[str, list[dict[str, Any]]]:
    key = tuple(id(s) for s in tools)
    found = _SPECS.get(key)
    if found is not None and all(a is b for a, b in zip(found[0], tools, strict=True)):
        return found[1], found[2]
    specs = [spec_json(s) for s in tools]
    fingerprint = _fingerprint(specs)
    if len(_SPECS) >= 64:
        _SPECS.pop(next(iter(_SPECS)))
    _SPECS[key] = (tuple(tools), fingerprint, specs)
    return fingerprint, specs


def _fingerprint(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def resolve(records: Iterable[Mapping[str, Any] | None]) -> list[dict[str, Any] | None]:
    """Each call's ``{"messages": [...], "tools": [...]}`` from the ``sent`` records of a
    run's model calls in order (None for a call stored without one: an older run).
    A message carries ``position`` (its place in the run's record) unless it was made
    for that call alone."""
    record: list[dict[str, Any]] = []
    made: list[dict[str, Any]] = []
    tools: list[dict[str, Any]] | None = None
    out: list[dict[str, Any] | None] = []
    for sent in records:
        if not isinstance(sent, Mapping):
            out.append(None)
            continue
        start = sent.get("from")
        start = start if isinstance(start, int) and 0 <= start <= len(record) else len(record)
        del record[start:]
        for message in sent.get("new") or ():
            if isinstance(message, Mapping):
                record.append({**message, "position": len(record)})
        for message in sent.get("made") or ():
            if isinstance(message, Mapping):
                made.append({**message, "made_for_call": True})
        if isinstance(sent.get("tools"), list):
            tools = list(sent["tools"])
        messages: list[dict[str, Any]] = []
        for item in sent.get("window") or ():
            if isinstance(item, int):
                messages.extend(record[item : item + 1])
            elif (
                isinstance(item, list) and len(item) == 2 and all(isinstance(i, int) for i in item)
            ):
                messages.extend(record[item[0] : item[1] + 1])
            elif isinstance(item, Mapping) and isinstance(item.get("made"), int):
                messages.extend(made[item["made"] : item["made"] + 1])
        out.append({"messages": messages, "tools": tools or []})
    return out


def sent_count(sent: Any) -> int:
    """How many messages a ``model_called`` event's ``sent`` says the call was given."""
    if not isinstance(sent, Mapping):
        return 0
    count = 0
    for item in sent.get("window") or ():
        if _is_range(item):
            count += max(0, item[1] - item[0] + 1)
        else:
            count += 1
    return count


def _is_range(item: Any) -> bool:
    return isinstance(item, list) and len(item) == 2 and all(isinstance(i, int) for i in item)
