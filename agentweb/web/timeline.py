"""Turn stored run events into what the pages show: steps, timing, cost, replay context.

Everything here reads stored events only; nothing calls a model or a tool. Rows of any
age are read with ``events.read``: the typed event where a row fits its type, and for an
older or partial row (a missing key is None) its class all the same, so such a row counts
in timing and compare as it always did; readers treat a None or ill-typed field as absent.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from agentweb.runs.event_text import pretty, text_of
from agentweb.runs.models import Run, RunEvent
from agentweb.runs.pricing import cost_usd
from agentweb.runtime import events as ev
from agentweb.runtime import trace
from agentweb.runtime.events import EVENT_TYPES


def step_cost(data: dict[str, Any], model: str) -> float | None:
    """A model call's cost in USD: what the engine stored, else an estimate from the one
    price table (``runs.pricing``); None when the model's price is unknown (shown "—")."""
    if "cost_usd" in data:
        value = data["cost_usd"]
        return float(value) if isinstance(value, int | float) and value == value else None
    tokens = data.get("tokens") or {}
    if not isinstance(tokens, dict):
        return None
    try:
        return cost_usd(str(data.get("model") or model), tokens)
    except (TypeError, ValueError):
        return None


@dataclass
class Step:
    """One stored event as the timeline shows it."""

    seq: int
    type: str
    at: Any
    data: dict[str, Any]
    turn: int = 0
    cost: float | None = 0.0
    ctx: int = 0  # replay: how many context messages the model had at this step
    final_text: bool = False  # a model turn whose text is the run's final answer
    event: ev.Event | None = field(default=None, repr=False)  # events.read(type, data)

    def __post_init__(self) -> None:
        if self.event is None:
            self.event = ev.read(self.type, self.data)  # stays None for an unknown type

    @property
    def dom_id(self) -> str:
        return f"event-{self.seq}"

    @property
    def template(self) -> str:
        """Its fragment's body: ``web/events/<type>.html`` (an imported file's unknown
        type shows its data)."""
        return template_for(self.type)

    @property
    def images(self) -> list[dict[str, Any]]:
        """The images a tool call returned, as stored: only URLs of our own image view
        (an imported file cannot make the page load anything else)."""
        if not isinstance(self.event, ev.ToolCallFinished):
            return []
        out = []
        images = self.event.images
        for image in images if isinstance(images, list) else ():
            url = image.get("url") if isinstance(image, dict) else None
            if isinstance(url, str) and _IMAGE_URL.search(url) and url.startswith("/"):
                out.append(
                    {
                        "url": url,
                        "width": _dimension(image.get("width")),
                        "height": _dimension(image.get("height")),
                    }
                )
        return out


def template_for(kind: str) -> str:
    return f"web/events/{kind}.html" if kind in EVENT_TYPES else "web/events/_other.html"


_IMAGE_URL = re.compile(r"/runs/\d+/images/[0-9a-f]{64}$")


def _dimension(value: Any) -> int | None:
    return value if isinstance(value, int) and 0 < value < 100_000 else None


def steps_for(events: Iterable[RunEvent], *, model: str = "", turn_base: int = 0) -> list[Step]:
    """Annotate events with the model turn number and per-step cost.

    ``turn_base`` is the number of ``model_called`` events before the first one given."""
    out = []
    turn = turn_base
    for event in events:
        data = event.data if isinstance(event.data, dict) else {"value": event.data}
        step = Step(seq=event.seq, type=event.type, at=event.at, data=data)
        if isinstance(step.event, ev.ModelCalled):
            turn += 1
            step.turn = turn
            step.cost = step_cost(data, model)
        out.append(step)
    _mark_final_text(out)
    return out


def _mark_final_text(steps: list[Step]) -> None:
    """The model turn that wrote the final answer says so instead of repeating it (the
    answer is shown once, in the run_finished card)."""
    finished = [s for s in steps if isinstance(s.event, ev.RunFinished)]
    if not finished:
        return
    last = finished[-1].event
    assert isinstance(last, ev.RunFinished)
    answer = str(last.final_answer or "").strip()
    if not answer:
        return
    for step in reversed(steps):
        if step.seq > finished[-1].seq or not isinstance(step.event, ev.ModelCalled):
            continue
        if str(step.event.text or "").strip() == answer:
            step.final_text = True
        return


@dataclass
class Timing:
    model_ms: float = 0.0
    tool_ms: float = 0.0
    wait_ms: float = 0.0  # waiting for a person to decide a tool call
    segments: list[dict[str, Any]] = field(default_factory=list)

    @property
    def total_ms(self) -> float:
        """Working time: model and tools (waiting for people is shown beside it)."""
        return self.model_ms + self.tool_ms

    @property
    def strip_ms(self) -> float:
        return self.total_ms + self.wait_ms

    @property
    def model_pct(self) -> float:
        return round(100 * self.model_ms / self.total_ms, 1) if self.total_ms else 0.0

    @property
    def tool_pct(self) -> float:
        return round(100 - self.model_pct, 1) if self.total_ms else 0.0


def _ms(value: Any) -> float:
    try:
        number = float(value or 0)
    except (TypeError, ValueError):
        return 0.0
    return number if 0 < number < float("inf") else 0.0


def _text(value: Any, absent: str = "") -> str:
    """A field as text; ``absent`` when it is None (a key an older row lacks)."""
    return absent if value is None else str(value)


def timing_for(events: Iterable[RunEvent | Step]) -> Timing:
    """Model time, tool time and time waiting for approval, plus the strip's segments in
    the order they happened."""
    timing = Timing()
    raw: list[dict[str, Any]] = []
    asked: dict[str, Any] = {}
    for item in events:
        match item.event if isinstance(item, Step) else ev.read(item.type, item.data):
            case ev.ModelCalled(latency_ms=latency):
                ms = _ms(latency)
                timing.model_ms += ms
                raw.append({"kind": "model", "ms": ms, "seq": item.seq, "label": "model"})
            case ev.ToolCallFinished(duration_ms=duration, tool=tool):
                ms = _ms(duration)
                timing.tool_ms += ms
                label = _text(tool, "tool")
                raw.append({"kind": "tool", "ms": ms, "seq": item.seq, "label": label})
            case ev.ApprovalRequested(call_id=call_id):
                asked[_text(call_id)] = item.at
            case ev.ApprovalDecided(call_id=call_id, tool=tool):
                start = asked.pop(_text(call_id), None)
                if start is None or item.at is None:
                    continue
                ms = _ms((item.at - start).total_seconds() * 1000)
                timing.wait_ms += ms
                raw.append(
                    {
                        "kind": "wait",
                        "ms": ms,
                        "seq": item.seq,
                        "label": f"waiting for approval ({_text(tool)})",
                    }
                )
    total = timing.strip_ms
    for seg in raw:
        seg["pct"] = round(100 * seg["ms"] / total, 2) if total else 0
        timing.segments.append(seg)
    return timing


def usage_for(run: Run) -> dict[str, Any]:
    usage = dict(run.usage or {})
    usage.setdefault("input_tokens", 0)
    usage.setdefault("output_tokens", 0)
    usage.setdefault("model_calls", 0)
    return usage


def total_cost(run: Run, steps: Sequence[Step] | None = None) -> float | None:
    """The run's cost in USD, or None when a model's price is unknown (never a guess)."""
    if steps is not None:
        costs = [s.cost for s in steps if isinstance(s.event, ev.ModelCalled)]
        if any(c is None for c in costs):
            return None
        usage_cost = (run.usage or {}).get("cost_usd")
        if isinstance(usage_cost, int | float) and usage_cost:
            return float(usage_cost)
        return sum(c for c in costs if c is not None)
    usage = run.usage or {}
    return cost_usd(
        run.model,
        {"input": usage.get("input_tokens", 0), "output": usage.get("output_tokens", 0)},
    )


# --- what each model call was sent (runtime.trace) ---------------------------------------


def sent_for(run: Run, seq: int) -> dict[str, Any] | None:
    """The messages and tool specs the model call stored as event ``seq`` was sent
    (``{"messages", "tools", "turn"}``), None when it is no model call or a call stored
    before the trace kept them."""
    calls = list(
        RunEvent.objects.filter(run=run, type="model_called", seq__lte=seq)
        .order_by("seq")
        .values_list("seq", "data")
    )
    if not calls or calls[-1][0] != seq:
        return None
    resolved = trace.resolve(
        data.get("sent") if isinstance(data, dict) else None for _, data in calls
    )[-1]
    if resolved is None:
        return None
    return {**resolved, "turn": len(calls)}


# --- replay: what the model had in front of it ------------------------------------------


@dataclass
class ContextMessage:
    index: int
    role: str
    text: str

    @property
    def kind(self) -> str:
        return self.role.split()[0] if self.role else "message"


def replay_context(task: str, steps: list[Step]) -> list[ContextMessage]:
    """Rebuild the conversation from stored events and set each step's ``ctx``: the number
    of messages the model had seen when that step happened.

    A ``model_called`` step sees everything before it; its reply becomes a message after.
    The system prompt is not an event, so the replay starts at the task."""
    messages: list[ContextMessage] = []

    def add(role: str, text: str) -> None:
        messages.append(ContextMessage(index=len(messages), role=role, text=text))

    add("user", task)
    for step in steps:
        step.ctx = len(messages)
        said = text_of(step.type, step.data).said
        if said is not None:
            add(*said)
    return messages


# --- compare: two runs, tool calls aligned --------------------------------------------------


@dataclass
class Call:
    call_id: str
    tool: str
    arguments: Any
    ok: bool | None = None
    result: Any = None
    error: str = ""
    duration_ms: float | None = None
    # a person's word on it: "awaiting", "approved", "rejected", "expired" ("": none asked)
    decision: str = ""
    comment: str = ""
    is_turn: ClassVar[bool] = False

    @property
    def key(self) -> str:
        return self.tool

    @property
    def not_run(self) -> bool:
        """Asked for and never run: rejected, expired or still awaiting a person."""
        return self.ok is None and self.decision in ("awaiting", "rejected", "expired")

    @property
    def args_text(self) -> str:
        return pretty(self.arguments)

    @property
    def result_text(self) -> str:
        if self.not_run:
            said = f": {self.comment}" if self.comment else ""
            return f"not run: {self.decision}{said}"
        return pretty(self.result) if self.ok is not False else f"error: {self.error}"


@dataclass
class Turn:
    """A model call, as compare pairs it with the other run's."""

    turn: int
    text: str
    asked: list[str]  # the tools it called, in order
    input_tokens: int
    output_tokens: int
    cost: float | None
    latency_ms: float
    is_turn: ClassVar[bool] = True

    @property
    def key(self) -> str:
        return "\0model"

    @property
    def said(self) -> str:
        return f"{self.text}|{','.join(self.asked)}"


def _tokens(tokens: Any, key: str) -> int:
    value = tokens.get(key) if isinstance(tokens, dict) else None
    return value if isinstance(value, int) and value >= 0 else 0


CallEvent = ev.ApprovalRequested | ev.ApprovalDecided | ev.ToolCallStarted | ev.ToolCallFinished


def _apply(call: Call, event: CallEvent) -> None:
    match event:
        case ev.ApprovalRequested(arguments=arguments):
            call.arguments = arguments
            call.decision = "awaiting"
        case ev.ApprovalDecided(decision=decision, comment=comment, arguments=arguments):
            call.decision = str(decision or "")
            call.comment = str(comment or "")
            if arguments is not None:
                call.arguments = arguments
        case ev.ToolCallStarted(tool=tool, arguments=arguments):
            call.tool = _text(tool) or call.tool
            call.arguments = arguments
        case ev.ToolCallFinished(ok=ok, result=result, error=error, duration_ms=duration):
            call.ok = bool(ok)
            call.result = result
            call.error = str(error or "")
            call.duration_ms = _ms(duration)


def _turn(step: Step, event: ev.ModelCalled) -> Turn:
    asked = event.tool_calls
    return Turn(
        turn=step.turn,
        text=str(event.text or ""),
        asked=[str(c.get("name", "")) for c in asked if isinstance(c, dict)]
        if isinstance(asked, list)
        else [],
        input_tokens=_tokens(event.tokens, "input"),
        output_tokens=_tokens(event.tokens, "output"),
        cost=step.cost,
        latency_ms=_ms(event.latency_ms),
    )


def calls_of(steps: Iterable[Step], *, turns: bool = False) -> list[Call | Turn]:
    """A run's tool calls in order, those a person rejected or let expire included;
    with ``turns`` its model turns too, each before the calls it asked for."""
    calls: dict[str, Call] = {}
    order: list[Call | Turn] = []
    for step in steps:
        event = step.event
        if isinstance(event, ev.ModelCalled):
            if turns:
                order.append(_turn(step, event))
        elif isinstance(event, CallEvent):
            call_id = _text(event.call_id)
            call = calls.get(call_id)
            if call is None:
                if isinstance(event, ev.ApprovalDecided):
                    continue
                call = calls[call_id] = Call(call_id, _text(event.tool), None)
                order.append(call)
            _apply(call, event)
    return order


@dataclass
class Row:
    left: Call | Turn | None
    right: Call | Turn | None
    tool_differs: bool = False
    args_differ: bool = False
    result_differs: bool = False

    @property
    def is_turn(self) -> bool:
        return any(side is not None and side.is_turn for side in (self.left, self.right))

    @property
    def changed_keys(self) -> list[str]:
        """Argument names whose values differ between the two calls (dict arguments)."""
        a = self.left.arguments if isinstance(self.left, Call) else None
        b = self.right.arguments if isinstance(self.right, Call) else None
        if not (isinstance(a, dict) and isinstance(b, dict)):
            return []
        return sorted(k for k in set(a) | set(b) if pretty(a.get(k)) != pretty(b.get(k)))


def _pair(a: Call | Turn, b: Call | Turn) -> Row:
    if isinstance(a, Turn) and isinstance(b, Turn):
        return Row(a, b, result_differs=a.said != b.said)
    assert isinstance(a, Call) and isinstance(b, Call)
    return Row(
        a, b, args_differ=a.args_text != b.args_text, result_differs=a.result_text != b.result_text
    )


def align(left: Sequence[Call | Turn], right: Sequence[Call | Turn]) -> list[Row]:
    """Align two runs' steps (model turns with model turns, calls by tool name: longest
    matching blocks), then mark what differs in each aligned pair."""
    from difflib import SequenceMatcher

    matcher = SequenceMatcher(a=[c.key for c in left], b=[c.key for c in right], autojunk=False)
    rows: list[Row] = []
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        if op == "equal":
            rows.extend(_pair(a, b) for a, b in zip(left[a0:a1], right[b0:b1], strict=True))
            continue
        lpart, rpart = left[a0:a1], right[b0:b1]
        for i in range(max(len(lpart), len(rpart))):
            one = lpart[i] if i < len(lpart) else None
            other = rpart[i] if i < len(rpart) else None
            if one is not None and other is not None and one.is_turn != other.is_turn:
                rows += [Row(one, None, tool_differs=True), Row(None, other, tool_differs=True)]
                continue
            if one is not None and other is not None and one.is_turn:
                rows.append(_pair(one, other))
                continue
            both = one is not None and other is not None
            rows.append(
                Row(
                    one,
                    other,
                    tool_differs=True,
                    args_differ=not both
                    or (
                        isinstance(one, Call)
                        and isinstance(other, Call)
                        and one.args_text != other.args_text
                    ),
                    result_differs=True,
                )
            )
    return rows


@dataclass
class Totals:
    """One side of compare's totals row."""

    input_tokens: int
    output_tokens: int
    cost: float | None
    timing: Timing
    turns: int
    calls: int
    not_run: int


def totals_of(steps: Sequence[Call | Turn], timing: Timing) -> Totals:
    turns = [s for s in steps if isinstance(s, Turn)]
    costs = [t.cost for t in turns]
    return Totals(
        input_tokens=sum(t.input_tokens for t in turns),
        output_tokens=sum(t.output_tokens for t in turns),
        cost=None if any(c is None for c in costs) else sum(c or 0.0 for c in costs),
        timing=timing,
        turns=len(turns),
        calls=sum(1 for s in steps if isinstance(s, Call)),
        not_run=sum(1 for s in steps if isinstance(s, Call) and s.not_run),
    )
