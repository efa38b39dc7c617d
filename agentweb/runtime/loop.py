"""The guarded, step-wise agent loop.

``Agent.step`` makes one model call, or runs the tool calls of the reply before it; it
returns the events and, when the run stops, an outcome. It never blocks on a human: a
call that needs approval ends the step with ``NeedsApproval``; ``Agent.decide`` records
decisions and the next ``step`` carries on. The state it mutates, and the outcomes, are
in ``state.py`` (plain JSON, so another process can resume); what it makes of a reply is
in ``replies.py``; how a reply's calls are planned and run (approval gate, journal) is in
``turns.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from . import events as ev
from . import trace
from .approvals import ApprovalGate, PriorTotal
from .config import AgentConfig
from .context import ContextPolicy
from .events import Event
from .gateway import Model, ModelCancelled, ModelError, ModelResponse, ToolSpec, guarded_call
from .images import ImageStore, MemoryImageStore, with_image_data
from .journal import ExecutionJournal, InMemoryJournal, PriorExecution
from .messages import Attachment, Message, SystemMessage, UserMessage
from .replies import TRUNCATED_MARK, clean_reply, model_called, safe_delta
from .state import (
    TERMINAL,
    BudgetExceeded,
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
)
from .tools import ToolArgumentError, ToolContext, ToolRegistry
from .turns import Turns

__all__ = [
    "TRUNCATED_MARK",
    "Agent",
    "AgentConfig",
    "BudgetCheck",
    "BudgetExceeded",
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


# -- the agent -----------------------------------------------------------------------------

Validator = Callable[[str, LoopState], "str | None"]
#: Asked before every model call: None to go on, or why the run may spend no more.
BudgetCheck = Callable[[LoopState], "BudgetExceeded | None"]


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
        budget: BudgetCheck | None = None,
    ) -> None:
        self.model = model
        self.budget = budget
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
        self.turns = Turns(tools, config, self.gate, self.journal, self.image_store)

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
        same calls instead of asking the model again. The next step runs them. Calls
        that are all quick reads (``Turns.reads_now``) have no side effect to protect:
        they run in the reply's step, whose events then hold their results too.

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
            stop = self.turns.resume(state, events, tool_context)
            return StepResult(events, self._carry_on(state, stop, events))
        state.status = "running"
        if state.iteration >= self.config.max_iterations:
            reason = f"reached the limit of {self.config.max_iterations} iterations"
            return StepResult(events, self._stop(state, reason, events))
        exceeded = self.budget(state) if self.budget is not None else None
        if exceeded is not None:  # no answer on the way: the run fails, naming the budget
            return StepResult(events, self._fail(state, exceeded.reason, events, exceeded.scope))
        response, seen, sent = self._call_model(state, events, on_delta, cancel)
        if response is None:
            return StepResult(events, state.outcome)
        message = clean_reply(state, response, self._tool_params, self.config.max_reply_chars)
        state.messages.append(message)
        called = model_called(response, message, state, seen)
        if sent is not None:
            called.sent, state.memory[trace.TRACE_KEY] = sent
        events.append(called)
        if cancelled():
            return StepResult(events + self.cancel(state), Cancelled())
        if not message.tool_calls:
            return StepResult(events, self._complete(state, message.content, events))
        stop = self.turns.plan(state, message.tool_calls, events)
        if stop is None and self.turns.reads_now(state) and not cancelled():
            stop = self.turns.resume(state, events, tool_context)  # quick reads: now
        return StepResult(events, self._carry_on(state, stop, events))

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
            arguments = None
            if d.approved and d.arguments is not None:
                t = self.tools.get(call.name)
                if t is None:
                    raise ToolArgumentError(f"unknown tool {call.name!r}")
                fixed, _ = t.repair(d.arguments)
                arguments = t.validate(fixed)
            call.decide(d.approved, d.comment, arguments)
            out.append(
                ev.ApprovalDecided(
                    call_id=call.call_id,
                    decision="approved" if d.approved else "rejected",
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
        return [ev.RunCancelled(iteration=state.iteration)]

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
    ) -> tuple[
        ModelResponse | None, dict[str, Any] | None, tuple[dict[str, Any], dict[str, Any]] | None
    ]:
        """The model's reply (None when it failed or was cancelled), what the policy says
        it was shown and what it was sent (``trace.record_sent``)."""
        prepared = self.context_policy.prepare(state, self.tools)
        sent = (
            trace.record_sent(state.memory, state.messages, prepared.messages, prepared.tools)
            if self.config.trace
            else None
        )
        budget = self.config.max_context_images if self.config.vision else 0
        messages = with_image_data(prepared.messages, self.image_store, budget)
        events.extend(prepared.events)
        state.iteration += 1
        try:
            with guarded_call(cancel, self.config.model_deadline):
                response = self._ask_model(messages, prepared.tools, on_delta)
        except ModelCancelled:
            events.extend(self.cancel(state))
            return None, None, None
        except ModelError as exc:
            self._fail(state, f"model error: {exc}", events)
            return None, None, None
        return response, prepared.info, sent

    def _ask_model(
        self,
        messages: Sequence[Message],
        specs: Sequence[ToolSpec],
        on_delta: Callable[[str], None] | None,
    ) -> ModelResponse:
        if self.config.stream:
            return self.model.stream(
                messages,
                specs,
                on_delta=safe_delta(on_delta, self.config.max_reply_chars),
                timeout=self.config.model_timeout,
            )
        return self.model.complete(messages, specs, timeout=self.config.model_timeout)

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
            state.messages.append(UserMessage(content=_EMPTY_REPLY))
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
                    ev.CompletionObjected(validator=self.validator_name, reason=str(objection))
                )
                return None
            return self._finish(state, answer, "validator", None, events)
        return self._finish(state, answer, "model", None, events)

    # -- endings ---------------------------------------------------------------------------

    def _carry_on(self, state: LoopState, stop: str | None, events: list[Event]) -> Outcome | None:
        """After a turn was planned or run: stop when it says so, else where it left the
        run (waiting for people or subtasks, or None: the next step goes on)."""
        return state.outcome if stop is None else self._stop(state, stop, events)

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
            ev.RunFinished(
                final_answer=answer,
                decided_by=decided_by,
                usage=state.usage.model_dump(),
                reason=reason,
                truncated=answer.endswith(TRUNCATED_MARK),
            )
        )
        return Finished(answer, decided_by, reason)

    def _fail(
        self, state: LoopState, reason: str, events: list[Event], budget: str | None = None
    ) -> Outcome:
        state.status = "failed"
        state.failure_reason = reason
        events.append(ev.RunFailed(reason=reason, budget=budget))
        return Failed(reason)

    # -- event builders --------------------------------------------------------------------

    def _run_started(self, state: LoopState) -> Event:
        first = state.messages[0] if state.messages else None
        return ev.RunStarted(
            task=state.task,
            model=self.model.name,
            scripted=bool(getattr(self.model, "scripted", False)),
            tools=self.tools.names(),
            max_iterations=self.config.max_iterations,
            # as the first call sends it (a host may have added to it since ``start``)
            system_prompt=first.content if isinstance(first, SystemMessage) else None,
            agent_version=self.config.agent_version,
            missing_tools=list(self.config.missing_tools),
        )


_CUT_OFF_REPLY = (
    "Your reply was cut off at the output token limit in the middle of a tool call, so "
    "nothing was run. Send the call again, with shorter arguments or split into smaller "
    "steps."
)
_EMPTY_REPLY = "Your reply was empty. Call a tool or give your answer."


def _callable_name(fn: Callable[..., Any]) -> str:
    module = getattr(fn, "__module__", None) or ""
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"{module}.{name}" if module else name


def _never() -> bool:
    return False


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
