"""The guarded, step-wise agent loop.

``Agent.step`` makes one model call and runs the tool calls of that turn; it returns the
events and, when the run stops, an outcome. It never blocks on a human: a call that needs
approval ends the step with ``NeedsApproval``; ``Agent.decide`` records decisions and the
next ``step`` carries on. The state it mutates, and the outcomes, are in ``state.py``
(plain JSON, so another process can resume); the record of side effects it consults
before a tool runs is the journal (``journal.py``).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

from . import events as ev
from .approvals import ApprovalGate, PriorTotal
from .compaction import ARGUMENTS_HINT
from .context import ContextPolicy
from .events import Event
from .execution import Invocation, ToolResult, format_for_model, run_tools
from .gateway import Model, ModelCancelled, ModelError, ModelResponse, guarded_call
from .images import MAX_IMAGE_BYTES, MAX_IMAGES_PER_RESULT, ImageStore, MemoryImageStore
from .journal import Admission, Declined, ExecutionJournal, InMemoryJournal, PriorExecution
from .messages import (
    AssistantMessage,
    Attachment,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from .parsing import (
    ensure_unique_ids,
    parse_arguments,
    parse_text_calls,
    resolve_tool_name,
    split_reasoning,
)
from .state import (
    TERMINAL,
    Cancelled,
    DecidedBy,
    Decision,
    Failed,
    Finished,
    LoopState,
    NeedsApproval,
    NeedsSubtasks,
    Outcome,
    PendingCall,
    StepResult,
    TurnCall,
)
from .tools import Tool, ToolArgumentError, ToolContext, ToolError, ToolRegistry

__all__ = [
    "Agent",
    "AgentConfig",
    "Cancelled",
    "Decision",
    "ExecutionJournal",
    "Failed",
    "Finished",
    "InMemoryJournal",
    "LoopState",
    "NeedsApproval",
    "NeedsSubtasks",
    "Outcome",
    "PendingCall",
    "PriorExecution",
    "RunIterator",
    "StepResult",
]

log = logging.getLogger(__name__)


# -- configuration -------------------------------------------------------------------------


class AgentConfig(BaseModel):
    system_prompt: str
    max_iterations: int = 20
    allowed_tools: list[str] | None = None
    risk_overrides: dict[str, str] = Field(default_factory=dict)
    stream: bool = False
    model_timeout: float = 60.0
    tool_timeout: float | None = None  # None: each tool's own timeout
    max_result_chars: int = 8000
    max_repeated_calls: int = 2  # identical consecutive call: reminder at 2nd, stop at 3rd
    max_no_progress: int = 3  # rounds repeating earlier calls+results before stopping
    vision: bool = True  # False: images from tools are stored and shown, never sent
    max_context_images: int = 4  # images sent per model call (the most recent ones)
    max_empty_replies: int = 3  # empty replies in a row before stopping
    max_reply_chars: int = 100_000  # a reply's text (and reasoning) beyond this is cut; 0: no cap
    model_deadline: float | None = 120.0  # seconds for a whole model call, retries included
    # Per tool: "always" | "never" | "default" | {"argument", "at_least", "sum_per"?};
    # they take precedence over the tools' own rules (see ``approvals``).
    approval_policies: dict[str, Any] = Field(default_factory=dict)


# -- the agent -----------------------------------------------------------------------------

Validator = Callable[[str, LoopState], "str | None"]


class Agent:
    """Runs one agent profile: a model, the tools it may use, its config and guards."""

    def __init__(
        self,
        model: Model,
        tools: ToolRegistry,
        config: AgentConfig,
        validator: Validator | None = None,
        journal: ExecutionJournal | None = None,
        context_policy: ContextPolicy | None = None,
        image_store: ImageStore | None = None,
        validator_name: str | None = None,
        prior_total: PriorTotal | None = None,
    ) -> None:
        self.model = model
        self.image_store: ImageStore = (
            image_store if image_store is not None else MemoryImageStore()
        )
        self.config = config
        if config.allowed_tools is not None:
            unknown = sorted(set(config.allowed_tools) - set(tools.names()))
            if unknown:
                log.warning("allowed_tools names tools that are not loaded: %s", unknown)
            tools = tools.subset(n for n in config.allowed_tools if n in tools)
        self.tools = tools
        self.validator = validator
        self.validator_name = validator_name or (_callable_name(validator) if validator else "")
        self.journal: ExecutionJournal = journal if journal is not None else InMemoryJournal()
        self.context_policy = context_policy or ContextPolicy()
        self._tool_params = {t.name: t.params for t in tools}
        self.gate = ApprovalGate(config.approval_policies, prior_total)

    # -- public API ------------------------------------------------------------------------

    def start(
        self,
        task: str,
        attachments: Iterable[Attachment] = (),
        context: dict[str, Any] | None = None,
    ) -> LoopState:
        messages: list[Message] = []
        if self.config.system_prompt:
            messages.append(SystemMessage(content=self.config.system_prompt))
        messages.append(UserMessage(content=task, attachments=list(attachments)))
        ctx = dict(context or {})
        run_id = ctx.get("run_id")
        return LoopState(
            task=task,
            run_id=None if run_id is None else str(run_id),
            context=ctx,
            messages=messages,
        )

    def step(
        self,
        state: LoopState,
        *,
        on_delta: Callable[[str], None] | None = None,
        tool_context: ToolContext | Mapping[str, Any] | None = None,
        cancel: Callable[[], bool] | None = None,
    ) -> StepResult:
        """One step (mutates ``state``): either one model call, or the tool calls of the
        reply before it.

        A reply with tool calls ends its step with the calls planned (``state.turn``)
        and none of them run: the host stores that state, so the reply and its call ids
        are durable before any side effect, and a recovered run carries on with the
        same calls instead of asking the model again. The next step runs them.

        ``cancel`` is checked before and after the model call and while it is waiting
        for the provider (the connection is closed); a cancelled step runs no tool."""
        if state.status in TERMINAL:
            return StepResult([], state.outcome)
        events: list[Event] = []
        if not state.started:
            state.started = True
            events.append(self._run_started(state))
        cancelled = cancel or _never
        if cancelled():
            return StepResult(events + self.cancel(state), Cancelled())
        if state.turn is not None:
            return StepResult(events, self._resume_turn(state, events, tool_context))
        state.status = "running"
        if state.iteration >= self.config.max_iterations:
            reason = f"reached the limit of {self.config.max_iterations} iterations"
            return StepResult(events, self._stop(state, reason, events))
        response, seen = self._call_model(state, events, on_delta, cancel)
        if response is None:
            return StepResult(events, state.outcome)
        message = self._assistant_turn(state, response)
        state.messages.append(message)
        events.append(self._model_called(response, message, state, seen))
        if cancelled():
            return StepResult(events + self.cancel(state), Cancelled())
        if not message.tool_calls:
            return StepResult(events, self._complete(state, message.content, events))
        return StepResult(events, self._plan_turn(state, message.tool_calls, events))

    def decide(self, state: LoopState, decisions: Iterable[Decision]) -> list[Event]:
        """Record human decisions on pending calls; the next ``step`` acts on them.

        Raises ``KeyError`` for an unknown or already decided call and
        ``ToolArgumentError`` when edited arguments do not fit the tool's schema."""
        by_id = {c.call_id: c for c in state.turn or () if c.state == "awaiting"}
        out: list[Event] = []
        for d in decisions:
            call = by_id.get(d.call_id)
            if call is None or call.decision is not None:
                raise KeyError(f"no pending approval for call {d.call_id!r}")
            if d.approved and d.arguments is not None:
                call.edited = True
                t = self.tools.get(call.name)
                if t is None:
                    raise ToolArgumentError(f"unknown tool {call.name!r}")
                fixed, _ = t.repair(d.arguments)
                call.arguments = t.validate(fixed)
            call.decision = "approved" if d.approved else "rejected"
            call.comment = d.comment
            out.append(
                ev.approval_decided(
                    call_id=call.call_id,
                    decision=call.decision,
                    comment=d.comment,
                    arguments=call.arguments if d.approved else None,
                )
            )
        if not state.pending_approvals and state.status == "waiting_approval":
            state.status = "running"
        return out

    def cancel(self, state: LoopState) -> list[Event]:
        if state.status in TERMINAL:
            return []
        state.status = "cancelled"
        return [ev.run_cancelled(iteration=state.iteration)]

    def run(
        self,
        state: LoopState,
        cancel: Callable[[], bool] = lambda: False,
        *,
        on_delta: Callable[[str], None] | None = None,
        tool_context: ToolContext | Mapping[str, Any] | None = None,
    ) -> RunIterator:
        """Drive ``step`` until an outcome; cancellation is checked between steps."""
        return RunIterator(self, state, cancel, on_delta, tool_context)

    # -- model turn ------------------------------------------------------------------------

    def _call_model(
        self,
        state: LoopState,
        events: list[Event],
        on_delta: Callable[[str], None] | None,
        cancel: Callable[[], bool] | None = None,
    ) -> tuple[ModelResponse | None, dict[str, Any] | None]:
        """The model's reply (None when it failed or was cancelled) and what the policy
        says it was shown."""
        prepared = self.context_policy.prepare(state, self.tools)
        messages, specs = self._with_images(prepared.messages), prepared.tools
        events.extend(prepared.events)
        state.iteration += 1
        try:
            with guarded_call(cancel, self.config.model_deadline):
                response = self._ask_model(messages, specs, on_delta)
        except ModelCancelled:
            events.extend(self.cancel(state))
            return None, None
        except ModelError as exc:
            self._fail(state, f"model error: {exc}", events)
            return None, None
        return response, prepared.info

    def _with_images(self, messages: Sequence[Message]) -> list[Message]:
        """Fill in the bytes of stored images for the model call: the most recent
        ``max_context_images`` of them, and none for a model without vision."""
        budget = self.config.max_context_images if self.config.vision else 0
        out: list[Message] = []
        for m in reversed(messages):
            if not isinstance(m, UserMessage | ToolMessage) or not m.attachments:
                out.append(m)
                continue
            kept: list[Attachment] = []
            for a in reversed(m.attachments):
                if budget <= 0:
                    break
                if not a.data and a.ref:
                    try:
                        raw = self.image_store.get(a.ref)
                    except Exception:
                        log.exception("image %s could not be read from the store", a.ref)
                        raw = None
                    if raw is None:
                        continue
                    a = a.model_copy(update={"data": base64.b64encode(raw).decode("ascii")})
                if a.data:
                    kept.insert(0, a)
                    budget -= 1
            out.append(m.model_copy(update={"attachments": kept}))
        out.reverse()
        return out

    def _store_images(self, res: ToolResult, data: dict[str, Any]) -> list[Attachment]:
        """Store a result's images once; the event and the conversation keep references."""
        attachments: list[Attachment] = []
        refs: list[dict[str, Any]] = []
        notes: list[str] = []
        for image in res.images[:MAX_IMAGES_PER_RESULT]:
            if len(image.data) > MAX_IMAGE_BYTES:
                notes.append(f"an image of {len(image.data)} bytes was over {MAX_IMAGE_BYTES}")
                continue
            try:
                stored = self.image_store.put(image)
            except Exception as exc:
                log.exception("storing an image failed")
                notes.append(f"an image could not be stored ({type(exc).__name__})")
                continue
            refs.append(stored.to_json())
            attachments.append(
                Attachment(
                    media_type=stored.media_type,
                    ref=stored.ref,
                    width=stored.width,
                    height=stored.height,
                )
            )
        if len(res.images) > MAX_IMAGES_PER_RESULT:
            notes.append(f"only the first {MAX_IMAGES_PER_RESULT} images were kept")
        if refs:
            data["images"] = refs
        if notes:
            data["image_notes"] = notes
        return attachments

    def _ask_model(
        self,
        messages: Sequence[Message],
        specs: Sequence[Any],
        on_delta: Callable[[str], None] | None,
    ) -> ModelResponse:
        if self.config.stream:
            return self.model.stream(
                messages,
                specs,
                on_delta=_safe_delta(on_delta, self.config.max_reply_chars),
                timeout=self.config.model_timeout,
            )
        return self.model.complete(messages, specs, timeout=self.config.model_timeout)

    def _assistant_turn(self, state: LoopState, response: ModelResponse) -> AssistantMessage:
        msg = response.message
        state.usage = state.usage + response.usage
        content, reasoning = msg.content, msg.reasoning
        if "<" in content:
            content, extra = split_reasoning(content)
            if extra:
                reasoning = f"{reasoning}\n\n{extra}" if reasoning else extra
        cap = self.config.max_reply_chars
        if cap and len(content) > cap:  # bounded cost: stored, shown and sent back cut
            content = content[:cap] + TRUNCATED_MARK
        if cap and reasoning and len(reasoning) > cap:
            reasoning = reasoning[:cap] + TRUNCATED_MARK
        calls = list(msg.tool_calls)
        cut = [c for c in response.incomplete_calls if c.name]
        state.cut_off = bool(response.incomplete_calls)
        if not calls and not cut and content:
            parsed = parse_text_calls(content, self._tool_params)
            if response.cut_off and (parsed.calls or _CALL_SYNTAX.search(content)):
                cut, state.cut_off = parsed.calls, True  # cut off inside written-out calls
                content = parsed.text if parsed.calls else ""
            else:
                calls, content = parsed.calls, parsed.text
        calls = [c if c.name in self._tool_params else self._resolved(c) for c in calls]
        if cut:
            calls.extend(c.model_copy(update={"arguments": {}}) for c in cut)
        if calls:
            seen = set(state.seen_call_ids)
            calls = ensure_unique_ids(calls, seen)
            state.seen_call_ids.extend(c.id for c in calls)
        state.cut_calls = [c.id for c in calls[len(calls) - len(cut) :]] if cut else []
        if content.strip():
            state.best_answer = content
        if content.strip() or calls:
            state.empty_replies = 0
        if content is msg.content and calls == msg.tool_calls and reasoning is msg.reasoning:
            return msg
        return AssistantMessage(content=content, tool_calls=calls, reasoning=reasoning)

    def _resolved(self, call: ToolCall) -> ToolCall:
        """``functions.get_x`` and kin → ``get_x`` when that is exactly one of our tools."""
        name = resolve_tool_name(call.name, self._tool_params)
        return call if name is None else call.model_copy(update={"name": name})

    def _complete(self, state: LoopState, answer: str, events: list[Event]) -> Outcome | None:
        """Completion layers: business validator, then the model's own stop."""
        if state.cut_off:  # cut inside a call it wrote out: not an answer, nothing ran
            state.messages.append(UserMessage(content=_CUT_OFF_REPLY))
            return None
        if not answer.strip():
            state.empty_replies += 1
            limit = self.config.max_empty_replies
            if limit and state.empty_replies >= limit:
                return self._stop(state, f"the model sent {limit} empty replies in a row", events)
            state.messages.append(
                UserMessage(content="Your reply was empty. Call a tool or give your answer.")
            )
            return None
        if self.validator is not None:
            try:
                objection = self.validator(answer, state)
            except Exception as exc:
                log.exception("validator failed")
                return self._fail(state, f"validator error: {type(exc).__name__}: {exc}", events)
            if objection:
                state.messages.append(UserMessage(content=objection))
                events.append(
                    ev.completion_objected(validator=self.validator_name, reason=str(objection))
                )
                return None
            return self._finish(state, answer, "validator", None, events)
        return self._finish(state, answer, "model", None, events)

    # -- tool turn -------------------------------------------------------------------------

    def _plan_turn(
        self,
        state: LoopState,
        calls: Sequence[ToolCall],
        events: list[Event],
    ) -> Outcome | None:
        """Classify the reply's calls into ``state.turn``; nothing runs here."""
        turn: list[TurnCall] = []
        fingerprints: list[str] = []
        in_turn: dict[tuple[str, str], Any] = {}  # policy totals within this reply
        stop_reason: str | None = None
        for call in calls:
            item, fp = self._plan_call(state, call, fingerprints, in_turn)
            if fp == "stop":
                stop_reason = f"the model kept repeating the same call to {call.name!r}"
            elif fp:
                fingerprints.append(fp)
                item.fp = fp
            turn.append(item)
        if stop_reason is not None:
            for item in turn:
                if item.state != "done":
                    self._error(item, f"Not run: the run stopped ({stop_reason}).")
            self._set_last_round(state, turn)
            self._append_results(state, turn)
            return self._stop(state, stop_reason, events)
        if all(c.state == "done" for c in turn):  # only refusals: nothing to store first
            return self._finish_turn(state, turn, events)
        state.turn = turn
        if any(c.state == "queued" for c in turn):
            return None  # the host stores the reply; the next step runs the calls
        return self._await_people(state, turn, events)

    def _await_people(
        self, state: LoopState, turn: list[TurnCall], events: list[Event]
    ) -> Outcome | None:
        state.status = "waiting_approval"
        for c in turn:
            if c.state == "awaiting" and c.decision is None and not c.announced:
                c.announced = True
                events.append(self._approval_requested(c))
        return state.outcome

    @staticmethod
    def _set_last_round(state: LoopState, turn: list[TurnCall]) -> None:
        # A call that failed may be retried once as is; the no-progress guard bounds that.
        state.last_round = [
            c.fp for c in turn if c.fp and (not c.is_error or c.fp in state.reminded)
        ]

    def _plan_call(
        self,
        state: LoopState,
        call: ToolCall,
        fingerprints: list[str],
        in_turn: dict[tuple[str, str], Any],
    ) -> tuple[TurnCall, str | None]:
        """Classify one call: error result now, awaiting a human, or queued to run."""
        item = TurnCall(call_id=call.id, name=call.name, arguments=call.arguments)
        if call.id in state.cut_calls:  # the reply ended inside this call: never run it
            return self._error(item, _CUT_OFF_CALL), None
        t = self.tools.get(call.name)
        if t is None:
            available = ", ".join(self.tools.names()) or "(none)"
            return self._error(
                item, f"Unknown tool {call.name!r}. Available tools: {available}."
            ), None
        item.risk = self.config.risk_overrides.get(t.name, t.risk)
        if call.raw_arguments is not None:
            parsed_args = parse_arguments(call.raw_arguments)
            if parsed_args.error is not None:
                if item.risk in ("medium", "high"):
                    item.state, item.reason = "awaiting", "malformed_arguments"
                    item.arguments = {}
                    return item, None
                return self._error(item, parsed_args.error + _ARGS_HINT), None
        args, item.repaired = t.repair(call.arguments)
        try:
            parsed = t.parse(args)
        except ToolArgumentError as exc:
            return self._error(item, str(exc)), None
        item.arguments = parsed.model_dump(mode="json")
        fp = _fingerprint(t.name, item.arguments)
        if fp in fingerprints:
            return self._error(item, _DUPLICATE), None
        if fp in state.last_round:
            if fp in state.reminded or self.config.max_repeated_calls <= 1:
                return self._error(item, "Stopped: repeated identical call."), "stop"
            state.reminded.append(fp)
            return self._error(item, _REPEAT_REMINDER.format(name=t.name)), fp
        override = self.config.risk_overrides.get(t.name)
        verdict = self.gate.verdict(t, item.arguments, item.risk, override, in_turn)
        item.policy_reason = verdict.reason
        if verdict.person:
            item.state, item.reason = "awaiting", verdict.code
        return item, fp

    @staticmethod
    def _error(item: TurnCall, message: str) -> TurnCall:
        item.state, item.content, item.is_error = "done", message, True
        return item

    def _execute(
        self,
        state: LoopState,
        turn: list[TurnCall],
        events: list[Event],
        tool_context: ToolContext | Mapping[str, Any] | None,
        force: frozenset[str] = frozenset(),
    ) -> None:
        """Run the queued calls of ``turn`` (concurrently), consulting the journal first.

        A call that no person approved and that runs because a total is below a limit is
        counted again as the journal records it (``Admission``); when the total has grown
        meanwhile (another run paid on the same group) it goes to a person instead."""
        runnable: list[tuple[TurnCall, Invocation]] = []
        held: dict[tuple[str, str], Any] = {}  # sent to a person here, counted nowhere yet
        for item in turn:
            if item.state != "queued":
                continue
            t = self.tools.get(item.name)
            assert t is not None
            admission = None
            if item.decision is None and item.call_id not in force:
                admission = self._admission(t, item, held)
            if admission is None:
                prior = self.journal.begin(item.call_id, t.name, item.arguments)
            else:
                prior = self.journal.begin(
                    item.call_id, t.name, item.arguments, admission=admission
                )
            if isinstance(prior, Declined):
                item.state, item.reason, item.policy_reason = "awaiting", "policy", prior.reason
                item.announced = False
                continue
            if prior is not None and not (prior.status == "started" and item.call_id in force):
                if prior.status == "started" and not t.idempotent:
                    item.state, item.reason = "awaiting", "unknown_outcome"
                    item.decision, item.announced = None, False
                    continue
                if prior.status != "started":
                    events.append(self._started(item, reused=True))
                    res = ToolResult(prior.status == "succeeded", prior.result, prior.error, 0.0)
                    self._record(item, res, events, reused=True)
                    continue
            try:
                parsed = t.parse(item.arguments)
            except ToolArgumentError as exc:
                self.journal.finish(item.call_id, False, None, str(exc), 0.0)
                self._error(item, str(exc))
                continue
            try:
                t.check_arguments(item.arguments)
            except ToolError as exc:  # the tool's own rules refuse these arguments
                reason = str(exc)
                self.journal.finish(item.call_id, False, None, reason, 0.0)
                events.append(self._started(item))
                self._record(item, ToolResult(False, None, reason, 0.0), events)
                item.content = reason
                continue
            timeout = self.config.tool_timeout or t.timeout
            ctx = self._tool_context(state, item.call_id, tool_context)
            runnable.append((item, Invocation(t, parsed, ctx, timeout)))
            if item.waiting_on is None:  # a suspended call announced itself already
                events.append(self._started(item))
        if not runnable:
            return
        results = run_tools([inv for _, inv in runnable])
        for (item, _), res in zip(runnable, results, strict=True):
            if res.waiting_on is not None:  # no result yet; it runs again when woken
                item.state, item.waiting_on = "waiting", res.waiting_on
                continue
            self.journal.finish(item.call_id, res.ok, res.result, res.error, res.duration_ms)
            self._record(item, res, events)

    def _admission(
        self, t: Tool, item: TurnCall, held: dict[tuple[str, str], Any]
    ) -> Admission | None:
        """The re-count of a call's ``sum_per`` total for the journal, if a total decides
        it. Earlier calls of this turn that it sends to a person (``held``) still count
        for later ones, as at planning; the ones it admitted are in the host's rows."""
        override = self.config.risk_overrides.get(t.name)
        key = self.gate.total_key(t, item.arguments, override)
        if key is None:
            return None

        def check() -> str | None:
            counted = dict(held)
            verdict = self.gate.recount(t, item.arguments, override, counted)
            if verdict is None:
                return None
            if verdict.person:
                if key in counted:
                    held[key] = counted[key]
                return verdict.reason
            item.policy_reason = verdict.reason  # the total as the call was recorded
            return None

        return Admission(keys=(json.dumps(key),), check=check)

    def _record(
        self, item: TurnCall, res: ToolResult, events: list[Event], reused: bool = False
    ) -> None:
        item.state, item.waiting_on = "done", None
        item.is_error = not res.ok
        if res.ok:
            item.content = format_for_model(res.result, self.config.max_result_chars)
        else:
            item.content = res.error or "Error"
        event = ev.tool_call_finished(
            call_id=item.call_id,
            tool=item.name,
            ok=res.ok,
            result=res.result,
            error=res.error,
            duration_ms=res.duration_ms,
            truncated=res.ok and len(item.content) > self.config.max_result_chars > 0,
            reused=reused,
        )
        if res.images:
            item.attachments = self._store_images(res, event.data)
        events.append(event)

    def _resume_turn(
        self,
        state: LoopState,
        events: list[Event],
        tool_context: ToolContext | Mapping[str, Any] | None,
    ) -> Outcome | None:
        """Run the stored turn's queued calls and act on the decisions made so far; close
        the turn once every call is resolved (the next step asks the model)."""
        turn = state.turn or []
        force: set[str] = set()
        for item in turn:
            if item.state == "waiting":  # woken: ask the suspended tool again
                item.state = "queued"
            if item.state != "awaiting" or item.decision is None:
                continue
            if item.decision == "rejected":
                reason = item.comment or "no reason given"
                self._error(item, f"A human reviewer rejected this call. Reason: {reason}")
                continue
            if item.reason == "malformed_arguments" and not item.edited:
                self._error(item, _UNREADABLE)  # fail closed: never run on guessed arguments
                continue
            item.state = "queued"
            if item.reason == "unknown_outcome":
                force.add(item.call_id)
        self._execute(state, turn, events, tool_context, frozenset(force))
        if any(c.state == "awaiting" for c in turn):  # undecided, or a crashed call surfaced
            return self._await_people(state, turn, events)
        if any(c.state == "waiting" for c in turn):
            state.status = "waiting_subtasks"
            return state.outcome
        state.turn = None
        state.status = "running"
        return self._finish_turn(state, turn, events)

    def _finish_turn(
        self, state: LoopState, turn: list[TurnCall], events: list[Event]
    ) -> Outcome | None:
        self._set_last_round(state, turn)
        self._append_results(state, turn)
        signature = _fingerprint(
            "round", [[c.name, c.arguments, c.content, c.is_error] for c in turn]
        )
        if signature in state.round_signatures:
            state.no_progress += 1
            if state.no_progress >= self.config.max_no_progress:
                return self._stop(state, _NO_PROGRESS, events)
        else:
            state.no_progress = 0
            state.round_signatures = [*state.round_signatures[-19:], signature]
        return None

    @staticmethod
    def _append_results(state: LoopState, turn: list[TurnCall]) -> None:
        for c in turn:
            state.messages.append(
                ToolMessage(
                    call_id=c.call_id,
                    name=c.name,
                    content=c.content or "",
                    is_error=c.is_error,
                    attachments=c.attachments,
                )
            )

    # -- endings ---------------------------------------------------------------------------

    def _stop(self, state: LoopState, reason: str, events: list[Event]) -> Outcome:
        """Hard bounds: finish with the best answer so far, or fail when there is none."""
        if state.best_answer:
            return self._finish(state, state.best_answer, "bounds", reason, events)
        return self._fail(state, f"stopped without an answer: {reason}", events)

    def _finish(
        self,
        state: LoopState,
        answer: str,
        decided_by: DecidedBy,
        reason: str | None,
        events: list[Event],
    ) -> Outcome:
        state.status = "finished"
        state.final_answer, state.decided_by, state.finish_reason = answer, decided_by, reason
        events.append(
            ev.run_finished(
                final_answer=answer,
                decided_by=decided_by,
                usage=state.usage.model_dump(),
                reason=reason,
                truncated=answer.endswith(TRUNCATED_MARK),
            )
        )
        return Finished(answer, decided_by, reason)

    def _fail(self, state: LoopState, reason: str, events: list[Event]) -> Outcome:
        state.status = "failed"
        state.failure_reason = reason
        events.append(ev.run_failed(reason=reason))
        return Failed(reason)

    # -- event builders --------------------------------------------------------------------

    def _run_started(self, state: LoopState) -> Event:
        return ev.run_started(
            task=state.task,
            model=self.model.name,
            scripted=bool(getattr(self.model, "scripted", False)),
            tools=self.tools.names(),
            max_iterations=self.config.max_iterations,
        )

    @staticmethod
    def _model_called(
        response: ModelResponse,
        message: AssistantMessage,
        state: LoopState,
        context: dict[str, Any] | None = None,
    ) -> Event:
        calls: list[dict[str, Any]] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls
        ]
        if response.cut_off and state.cut_calls:  # stopped at the output token limit
            cut = set(state.cut_calls)
            for c in calls:
                if c["id"] in cut:
                    c["cut_off"] = True
        return ev.model_called(
            model=response.model,
            latency_ms=round(response.latency_ms, 3),
            input_tokens=response.usage.input_tokens,
            output_tokens=response.usage.output_tokens,
            text=message.content,
            tool_calls=calls,
            finish_reason=response.finish_reason,
            iteration=state.iteration,
            cut_off=response.cut_off,
            truncated=message.content.endswith(TRUNCATED_MARK),
            reasoning=message.reasoning,
            context=context,
        )

    @staticmethod
    def _started(item: TurnCall, reused: bool = False) -> Event:
        approval: dict[str, str] | None = None
        if item.decision == "approved":
            approval = {"by": "person"}
        elif item.risk in ("medium", "high") or item.reason == "policy":
            approval = {"by": "policy", "reason": item.policy_reason or "no rule asks"}
        return ev.tool_call_started(
            call_id=item.call_id,
            tool=item.name,
            arguments=item.arguments,
            risk=item.risk,
            approval=approval,
            repaired=item.repaired,
            reused=reused,
        )

    @staticmethod
    def _approval_requested(item: TurnCall) -> Event:
        why = item.policy_reason if item.reason in ("policy", "high_risk") else None
        return ev.approval_requested(
            call_id=item.call_id,
            tool=item.name,
            arguments=item.arguments,
            risk=item.risk,
            reason=item.reason,
            why=why,  # in words, e.g. the total a rule reached
        )

    @staticmethod
    def _tool_context(
        state: LoopState, call_id: str, given: ToolContext | Mapping[str, Any] | None
    ) -> ToolContext:
        if isinstance(given, ToolContext):
            return dataclasses.replace(given, call_id=call_id)
        src: Mapping[str, Any] = given if given is not None else state.context
        return ToolContext(
            call_id=call_id,
            run_id=_str_or_none(src.get("run_id", state.run_id)),
            user=_str_or_none(src.get("user")),
            subject=_str_or_none(src.get("subject")),
            extra=dict(src.get("extra") or src),
        )


TRUNCATED_MARK = "\n\n[…reply truncated]"
_CALL_SYNTAX = re.compile(
    r"<tool_call>|<function=|\[TOOL_CALLS\]|<\|python_tag\|>|^\s*Action\s*:", re.M
)
_CUT_OFF_CALL = (
    "Your reply was cut off at the output token limit while you were writing this call, "
    "so it was not run. Send the call again, with shorter arguments or split into "
    "smaller steps."
)
_CUT_OFF_REPLY = (
    "Your reply was cut off at the output token limit in the middle of a tool call, so "
    "nothing was run. Send the call again, with shorter arguments or split into smaller "
    "steps."
)
_DUPLICATE = "Duplicate of an identical call in this turn; see its result."
_NO_PROGRESS = "no progress: the same calls keep giving the same results"
_UNREADABLE = (
    "The call was approved, but its arguments could not be read and no corrected ones were "
    "given, so it was not run. Call the tool again with valid JSON arguments."
)
_ARGS_HINT = ARGUMENTS_HINT
_REPEAT_REMINDER = (
    "You already called {name} with exactly these arguments in the previous step and the "
    "result is above. Do not repeat the same call: use that result, change the arguments, "
    "or give your final answer."
)


def _safe_delta(
    on_delta: Callable[[str], None] | None, cap: int = 0
) -> Callable[[str], None] | None:
    """Text previews must not break a run: a failing ``on_delta`` is logged and dropped.
    With ``cap``, previews stop after that many characters (the reply is cut there)."""
    if on_delta is None:
        return None
    broken = False
    sent = 0

    def deliver(text: str) -> None:
        nonlocal broken, sent
        if broken:
            return
        if cap:
            if sent >= cap:
                return
            text = text[: cap - sent]
            sent += len(text)
        try:
            on_delta(text)
        except Exception:
            broken = True
            log.exception("on_delta failed; no more previews for this model call")

    return deliver


def _callable_name(fn: Callable[..., Any]) -> str:
    module = getattr(fn, "__module__", None) or ""
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"{module}.{name}" if module else name


def _never() -> bool:
    return False


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _fingerprint(name: str, args: Any) -> str:
    blob = json.dumps(args, sort_keys=True, separators=(",", ":"), default=str)
    return name + ":" + hashlib.sha1(blob.encode(), usedforsecurity=False).hexdigest()[:16]


class RunIterator(Iterator[Event]):
    """Iterator of events from ``Agent.run``; ``.outcome`` holds the final outcome."""

    def __init__(
        self,
        agent: Agent,
        state: LoopState,
        cancel: Callable[[], bool],
        on_delta: Callable[[str], None] | None,
        tool_context: ToolContext | Mapping[str, Any] | None,
    ) -> None:
        self.state = state
        self._gen = self._drive(agent, cancel, on_delta, tool_context)

    @property
    def outcome(self) -> Outcome | None:
        return self.state.outcome

    def __iter__(self) -> RunIterator:
        return self

    def __next__(self) -> Event:
        return next(self._gen)

    def _drive(
        self,
        agent: Agent,
        cancel: Callable[[], bool],
        on_delta: Callable[[str], None] | None,
        tool_context: ToolContext | Mapping[str, Any] | None,
    ) -> Iterator[Event]:
        while True:
            if self.state.status not in TERMINAL and cancel():
                yield from agent.cancel(self.state)
                return
            result = agent.step(
                self.state, on_delta=on_delta, tool_context=tool_context, cancel=cancel
            )
            yield from result.events
            if result.outcome is not None:
                return
