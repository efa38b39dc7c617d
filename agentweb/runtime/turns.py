"""A turn: the tool calls of one model reply, from planning to their results.

``plan`` classifies the reply's calls into ``state.turn`` and runs none of them: each is
refused at once (unknown tool, bad arguments, a duplicate, a repeat), put to a person
(the ``ApprovalGate`` decides), or queued. The host stores that state, so the reply and
its call ids are durable before any side effect. ``resume`` (the next step) acts on the
decisions made so far and runs the queued calls, consulting the journal first (a call
it knows is not run again) and re-counting a total that let a call through
(``Admission``). Once every call is resolved their results join the conversation and
the turn closes. Both return a reason when the run must stop (the loop ends it).

A call moves only through ``TurnCall``'s transitions (``state.py``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from . import events as ev
from .approvals import ApprovalGate
from .compaction import ARGUMENTS_HINT
from .config import AgentConfig
from .events import Event
from .execution import Invocation, ToolResult, format_for_model, quick_read, run_tools
from .images import ImageStore, store_images
from .journal import Admission, Declined, ExecutionJournal
from .messages import ToolCall, ToolMessage
from .parsing import parse_arguments
from .state import LoopState, TurnCall
from .tools import Tool, ToolArgumentError, ToolContext, ToolError, ToolRegistry

__all__ = ["Turns", "fingerprint"]

_CUT_OFF_CALL = (
    "Your reply was cut off at the output token limit while you were writing this call, "
    "so it was not run. Send the call again, with shorter arguments or split into "
    "smaller steps."
)
_DUPLICATE = "Duplicate of an identical call in this turn; see its result."
_NO_PROGRESS = "no progress: the same calls keep giving the same results"
_UNREADABLE = (
    "The call was approved, but its arguments could not be read and no corrected ones were "
    "given, so it was not run. Call the tool again with valid JSON arguments."
)
_REPEAT_REMINDER = (
    "You already called {name} with exactly these arguments in the previous step and the "
    "result is above. Do not repeat the same call: use that result, change the arguments, "
    "or give your final answer."
)
_STOP = "stop"  # what ``_plan_call`` returns for a call that stops the run
#: ``TurnCall.reason`` of a dry run's call that is not executed (``AgentConfig.dry_run``)
DRY = "dry_run"


class Turns:
    """Plans and runs the turns of one agent (its tools, config, gate and journal)."""

    def __init__(
        self,
        tools: ToolRegistry,
        config: AgentConfig,
        gate: ApprovalGate,
        journal: ExecutionJournal,
        image_store: ImageStore,
    ) -> None:
        self.tools = tools
        self.config = config
        self.gate = gate
        self.journal = journal
        self.image_store = image_store

    # -- planning ----------------------------------------------------------------------------

    def plan(self, state: LoopState, calls: Sequence[ToolCall], events: list[Event]) -> str | None:
        """Classify the reply's calls into ``state.turn``; nothing runs here."""
        turn: list[TurnCall] = []
        fingerprints: list[str] = []
        in_turn: dict[tuple[str, str], Any] = {}  # policy totals within this reply
        stop_reason: str | None = None
        for call in calls:
            item, fp = self._plan_call(state, call, fingerprints, in_turn)
            if fp == _STOP:
                stop_reason = f"the model kept repeating the same call to {call.name!r}"
            elif fp:
                fingerprints.append(fp)
                item.fp = fp
            turn.append(item)
        if stop_reason is not None:
            for item in turn:
                if item.state != "done":
                    item.refuse(f"Not run: the run stopped ({stop_reason}).")
            _set_last_round(state, turn)
            _append_results(state, turn)
            return stop_reason
        if all(c.state == "done" for c in turn):  # only refusals: nothing to store first
            return self._close(state, turn)
        state.turn = turn
        if not any(c.state == "queued" for c in turn):
            _await_people(state, turn, events)
        return None  # queued calls: the host stores the reply; the next step runs them

    def _plan_call(
        self,
        state: LoopState,
        call: ToolCall,
        fingerprints: list[str],
        in_turn: dict[tuple[str, str], Any],
    ) -> tuple[TurnCall, str | None]:
        """Classify one call: refused now, awaiting a person, or queued to run; with its
        fingerprint (``_STOP``: it stops the run)."""
        item = TurnCall(call_id=call.id, name=call.name, arguments=call.arguments)
        if call.id in state.cut_calls:  # the reply ended inside this call: never run it
            return item.refuse(_CUT_OFF_CALL), None
        t = self.tools.get(call.name)
        if t is None:
            available = ", ".join(self.tools.names()) or "(none)"
            return item.refuse(f"Unknown tool {call.name!r}. Available tools: {available}."), None
        item.risk = self.config.risk_overrides.get(t.name, t.risk)
        if call.raw_arguments is not None:
            parsed_args = parse_arguments(call.raw_arguments)
            if parsed_args.error is not None:
                if item.risk in ("medium", "high") and not self.config.dry_run:
                    item.arguments = {}
                    item.ask("malformed_arguments")
                    return item, None
                return item.refuse(parsed_args.error + ARGUMENTS_HINT), None
        args, item.repaired = t.repair(call.arguments)
        try:
            parsed = t.parse(args)
        except ToolArgumentError as exc:
            return item.refuse(str(exc)), None
        item.arguments = parsed.model_dump(mode="json")
        fp = fingerprint(t.name, item.arguments)
        if fp in fingerprints:
            return item.refuse(_DUPLICATE), None
        if fp in state.last_round:
            if fp in state.reminded or self.config.max_repeated_calls <= 1:
                return item.refuse("Stopped: repeated identical call."), _STOP
            state.reminded.append(fp)
            return item.refuse(_REPEAT_REMINDER.format(name=t.name)), fp
        override = self.config.risk_overrides.get(t.name)
        verdict = self.gate.verdict(t, item.arguments, item.risk, override, in_turn)
        item.policy_reason = verdict.reason
        if self.config.dry_run and (verdict.person or item.risk in ("medium", "high")):
            item.reason = DRY  # queued, never executed nor put to a person (``_execute``)
        elif verdict.person:
            item.ask(verdict.code)
        return item, fp

    def reads_now(self, state: LoopState) -> bool:
        """Whether the planned turn may run in the step of its reply: every call that is
        to run is a quick read (``quick_read``: a read-only tool, low risk for this agent,
        counted by no total, its last call quick). A read changes nothing, so running it
        before the reply is stored risks nothing: a worker that dies first leaves neither
        the reply nor an effect behind, and the recovered run asks the model again."""
        turn = state.turn or []
        queued = [c for c in turn if c.state == "queued"]
        if not queued or any(c.state not in ("queued", "done") for c in turn):
            return False
        for item in queued:
            t = self.tools.get(item.name)
            if t is None or item.risk != "low" or item.reason == DRY or not quick_read(t):
                return False
            if self.gate.total_key(t, item.arguments, self.config.risk_overrides.get(t.name)):
                return False
        return True

    # -- running -----------------------------------------------------------------------------

    def resume(
        self,
        state: LoopState,
        events: list[Event],
        tool_context: ToolContext | Mapping[str, Any] | None,
    ) -> str | None:
        """Act on the decisions made so far and run the stored turn's queued calls; close
        the turn once every call is resolved (the next step asks the model)."""
        turn = state.turn or []
        force: set[str] = set()
        for item in turn:
            if item.state == "waiting":  # woken: ask the suspended tool again
                item.wake()
            if item.state != "awaiting" or item.decision is None:
                continue
            if item.decision == "rejected":
                reason = item.comment or "no reason given"
                item.refuse(f"A human reviewer rejected this call. Reason: {reason}")
                continue
            if item.reason == "malformed_arguments" and not item.edited:
                item.refuse(_UNREADABLE)  # fail closed: never run on guessed arguments
                continue
            item.release()
            if item.reason == "unknown_outcome":
                force.add(item.call_id)
        self._execute(state, turn, events, tool_context, frozenset(force))
        if any(c.state == "awaiting" for c in turn):  # undecided, or a crashed call surfaced
            _await_people(state, turn, events)
            return None
        if any(c.state == "waiting" for c in turn):
            state.status = "waiting_subtasks"
            return None
        state.turn = None
        state.status = "running"
        return self._close(state, turn)

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
        recorded = getattr(self.journal, "recorded", None)  # a fork's source's results
        for item in turn:
            if item.state != "queued":
                continue
            t = self.tools.get(item.name)
            assert t is not None
            known = recorded(t.name, item.arguments) if recorded is not None else None
            if known is not None:
                events.append(_started(item, recorded=True))
                res = ToolResult(known.status == "succeeded", known.result, known.error, 0.0)
                self._record(item, res, events, recorded=True)
                continue
            if item.reason == DRY:
                events.append(_started(item, dry=True))
                would = {"dry_run": True, "would_call": t.name, "arguments": item.arguments}
                self._record(item, ToolResult(True, would, None, 0.0), events, dry=True)
                continue
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
                item.ask("policy", why=prior.reason)
                continue
            if prior is not None and not (prior.status == "started" and item.call_id in force):
                if prior.status == "started" and not t.idempotent:
                    item.ask("unknown_outcome")
                    continue
                if prior.status != "started":
                    events.append(_started(item, reused=True))
                    res = ToolResult(prior.status == "succeeded", prior.result, prior.error, 0.0)
                    self._record(item, res, events, reused=True)
                    continue
            try:
                parsed = t.parse(item.arguments)
            except ToolArgumentError as exc:
                self.journal.finish(item.call_id, False, None, str(exc), 0.0)
                item.refuse(str(exc))
                continue
            try:
                t.check_arguments(item.arguments)
            except ToolError as exc:  # the tool's own rules refuse these arguments
                reason = str(exc)
                self.journal.finish(item.call_id, False, None, reason, 0.0)
                events.append(_started(item))
                self._record(item, ToolResult(False, None, reason, 0.0), events)
                item.content = reason  # verbatim, even when empty
                continue
            timeout = self.config.tool_timeout or t.timeout
            ctx = _tool_context(state, item.call_id, tool_context)
            runnable.append((item, Invocation(t, parsed, ctx, timeout)))
            if item.waiting_on is None:  # a suspended call announced itself already
                events.append(_started(item))
        if not runnable:
            return
        results = run_tools([inv for _, inv in runnable])
        for (item, _), res in zip(runnable, results, strict=True):
            if res.waiting_on is not None:  # no result yet; it runs again when woken
                item.suspend(res.waiting_on)
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
        self,
        item: TurnCall,
        res: ToolResult,
        events: list[Event],
        reused: bool = False,
        dry: bool = False,
        recorded: bool = False,
    ) -> None:
        max_chars = self.config.max_result_chars
        content = format_for_model(res.result, max_chars) if res.ok else res.error or "Error"
        item.resolve(content, not res.ok)
        images: list[dict[str, Any]] = []
        notes: list[str] = []
        if res.images:
            item.attachments, images, notes = store_images(self.image_store, res.images)
        events.append(
            ev.ToolCallFinished(
                call_id=item.call_id,
                tool=item.name,
                ok=res.ok,
                result=res.result,
                error=res.error,
                duration_ms=res.duration_ms,
                truncated=res.ok and len(content) > max_chars > 0,
                reused=reused,
                dry=dry,
                recorded=recorded,
                images=images or None,
                image_notes=notes or None,
            )
        )

    # -- closing -----------------------------------------------------------------------------

    def _close(self, state: LoopState, turn: list[TurnCall]) -> str | None:
        """The turn's results join the conversation; a round that repeats an earlier one
        (same calls, same results) too often stops the run."""
        _set_last_round(state, turn)
        _append_results(state, turn)
        signature = fingerprint(
            "round", [[c.name, c.arguments, c.content, c.is_error] for c in turn]
        )
        if signature in state.round_signatures:
            state.no_progress += 1
            if state.no_progress >= self.config.max_no_progress:
                return _NO_PROGRESS
        else:
            state.no_progress = 0
            state.round_signatures = [*state.round_signatures[-19:], signature]
        return None


def _await_people(state: LoopState, turn: list[TurnCall], events: list[Event]) -> None:
    state.status = "waiting_approval"
    for c in turn:
        if c.announce():
            why = c.policy_reason if c.reason in ("policy", "high_risk") else None
            events.append(
                ev.ApprovalRequested(
                    call_id=c.call_id,
                    tool=c.name,
                    arguments=c.arguments,
                    risk=c.risk,
                    reason=c.reason,
                    why=why,  # in words, e.g. the total a rule reached
                )
            )


def _set_last_round(state: LoopState, turn: list[TurnCall]) -> None:
    # A call that failed may be retried once as is; the no-progress guard bounds that.
    state.last_round = [c.fp for c in turn if c.fp and (not c.is_error or c.fp in state.reminded)]


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


def _started(
    item: TurnCall, reused: bool = False, dry: bool = False, recorded: bool = False
) -> Event:
    approval: dict[str, str] | None = None
    if dry or recorded:
        pass  # nothing is executed: nobody and no rule let it run
    elif item.decision == "approved":
        approval = {"by": "person"}
    elif item.risk in ("medium", "high") or item.reason == "policy":
        approval = {"by": "policy", "reason": item.policy_reason or "no rule asks"}
    return ev.ToolCallStarted(
        call_id=item.call_id,
        tool=item.name,
        arguments=item.arguments,
        risk=item.risk,
        approval=approval,
        repaired=item.repaired or None,
        reused=reused,
        dry=dry,
        recorded=recorded,
    )


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


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def fingerprint(name: str, args: Any) -> str:
    """A short stable digest of a call (or a round): ``name`` and its JSON arguments."""
    blob = _CANONICAL(args)
    return name + ":" + hashlib.sha1(blob.encode(), usedforsecurity=False).hexdigest()[:16]


#: ``json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)``, its encoder
#: made once (``json.dumps`` with options makes a new one per call).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str).encode
