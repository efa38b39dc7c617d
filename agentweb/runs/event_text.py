"""What each stored event says in words: one function per event type, in one table.

Every place that turns an event into text asks :func:`text_of`: the run tree's latest
step (``summary``), the lines ``manage.py run_task`` prints (``log``) and the replay's
rebuilt conversation (``said``: the message the model read after the event, if any). The
timeline's HTML fragment of each type is ``templates/web/events/<type>.html``. A new
event type gets its function here and its template there; a test checks that every type
of ``runtime.events`` has both.

Everything returned is plain text; templates escape it (model and tool text is data).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agentweb.runtime import events as ev


@dataclass(frozen=True, slots=True)
class EventText:
    summary: str  # one short line: the run tree's latest step
    log: str  # the line ``run_task`` prints
    said: tuple[str, str] | None = None  # (role, text) the model read next, in the replay


def pretty(value: Any) -> str:
    """JSON pretty-printed for a <pre> (a string holding JSON is parsed first)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)


def short(text: Any, limit: int = 120) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis."""
    value = " ".join(str(text or "").split())
    return value if len(value) <= limit else value[: limit - 1] + "…"


def _inline(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _ms(value: Any) -> float:
    """A stored duration to format (an imported file's may be anything)."""
    return value if isinstance(value, int | float) else 0


def _run_started(d: Mapping[str, Any]) -> EventText:
    missing = [str(n) for n in d.get("missing_tools") or () if isinstance(n, str)]
    if missing:
        note = f"run started without {', '.join(missing)} (not loaded here)"
        return EventText(note, f"{ev.RUN_STARTED}: {note}")
    return EventText("run started", ev.RUN_STARTED)


def _model_called(d: Mapping[str, Any]) -> EventText:
    calls = [c for c in d.get("tool_calls") or () if isinstance(c, dict)]
    names = [str(c.get("name")) for c in calls]
    text = str(d.get("text") or "")
    summary = "model asked for " + ", ".join(names) if names else "model: " + short(text)
    tokens = d.get("tokens")
    if not isinstance(tokens, dict):
        tokens = {}
    line = text.strip().replace("\n", " ")
    listed = ", ".join(c.get("name", "?") for c in calls)
    log = (
        f"model {d.get('model')} {_ms(d.get('latency_ms')):.0f} ms "
        f"({tokens.get('input', 0)}→{tokens.get('output', 0)} tokens)"
        + (f": {line[:160]}" if line else "")
        + (f" → {listed}" if listed else "")
    )
    parts = [text] if text else []
    parts += [f"→ {c.get('name')}({pretty(c.get('arguments') or {})})" for c in calls]
    return EventText(summary, log, ("assistant", "\n".join(parts) or "(no text)"))


def _tool_call_started(d: Mapping[str, Any]) -> EventText:
    tool = d.get("tool")
    return EventText(f"running {tool}", f"→ {tool}({_inline(d.get('arguments'))})")


def _tool_call_finished(d: Mapping[str, Any]) -> EventText:
    tool = d.get("tool")
    ok = d.get("ok", True)
    status = "ok" if d.get("ok") else f"error: {d.get('error')}"
    body = pretty(d.get("result")) if ok else f"error: {d.get('error')}"
    return EventText(
        f"{tool} {'ok' if d.get('ok') else 'failed'}",
        f"← {tool} {status} in {_ms(d.get('duration_ms')):.0f} ms",
        (f"tool · {d.get('tool', '')}", body),
    )


def _approval_requested(d: Mapping[str, Any]) -> EventText:
    tool = d.get("tool")
    return EventText(
        f"waiting for a person to decide {tool}",
        f"⏸ approval needed for {tool}({_inline(d.get('arguments'))})",
    )


def _approval_decided(d: Mapping[str, Any]) -> EventText:
    tool, decision = d.get("tool"), d.get("decision")
    said = None
    if decision != "approved":  # a rejection or an expiry goes back to the model
        said = ("tool", f"{d.get('tool', '')} {decision}: {d.get('comment', '')}")
    return EventText(
        f"{tool} {decision}", f"✔ {tool} {decision} by {d.get('by')}: {d.get('comment', '')}", said
    )


def _approval_given(d: Mapping[str, Any]) -> EventText:
    tool, by = d.get("tool"), d.get("by")
    progress = f"{d.get('given')} of {d.get('needed')}"
    return EventText(
        f"{tool} approved by {by} ({progress})", f"✔ {tool} approved by {by} ({progress})"
    )


def _context_compacted(d: Mapping[str, Any]) -> EventText:
    said = f"context compacted: {d.get('tokens_before')} → {d.get('tokens_after')} tokens"
    return EventText("context compacted", ev.CONTEXT_COMPACTED, ("system", said))


def _run_finished(d: Mapping[str, Any]) -> EventText:
    answer = d.get("final_answer")
    return EventText("answered: " + short(answer), f"finished: {answer}")


def _run_failed(d: Mapping[str, Any]) -> EventText:
    return EventText("failed: " + short(d.get("reason")), f"failed: {d.get('reason')}")


def _run_cancelled(d: Mapping[str, Any]) -> EventText:
    return EventText("cancelled", ev.RUN_CANCELLED)


def _subtask_started(d: Mapping[str, Any]) -> EventText:
    return EventText(f"delegated task #{d.get('task_id')} to {d.get('agent')}", ev.SUBTASK_STARTED)


def _subtask_finished(d: Mapping[str, Any]) -> EventText:
    return EventText(f"task #{d.get('task_id')} {d.get('status')}", ev.SUBTASK_FINISHED)


def _completion_objected(d: Mapping[str, Any]) -> EventText:
    said = (f"validator · {d.get('validator', '')}", str(d.get("reason") or ""))
    return EventText("completion objected", ev.COMPLETION_OBJECTED, said)


#: event type -> its words (every type of ``runtime.events.EVENT_TYPES``)
TEXT: dict[str, Callable[[Any], EventText]] = {
    ev.RUN_STARTED: _run_started,
    ev.MODEL_CALLED: _model_called,
    ev.TOOL_CALL_STARTED: _tool_call_started,
    ev.TOOL_CALL_FINISHED: _tool_call_finished,
    ev.APPROVAL_REQUESTED: _approval_requested,
    ev.APPROVAL_DECIDED: _approval_decided,
    ev.CONTEXT_COMPACTED: _context_compacted,
    ev.RUN_FINISHED: _run_finished,
    ev.RUN_FAILED: _run_failed,
    ev.RUN_CANCELLED: _run_cancelled,
    ev.SUBTASK_STARTED: _subtask_started,
    ev.SUBTASK_FINISHED: _subtask_finished,
    ev.COMPLETION_OBJECTED: _completion_objected,
    ev.APPROVAL_GIVEN: _approval_given,
}


def text_of(kind: str, data: Mapping[str, Any]) -> EventText:
    """The words for an event; a type we do not know (an imported file's) is its name."""
    render = TEXT.get(kind)
    if render is None:
        return EventText(kind.replace("_", " "), kind)
    return render(data)
