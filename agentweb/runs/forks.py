"""Forks (DESIGN §14): a dry run that starts from a past run's conversation at one of its
events and continues with another profile version or model.

The fork's events up to ``at_seq`` are copies of the source's; its loop state is the
source's record of messages (``LoopState.messages``, the conversation as the model saw it)
cut at that point, under the fork's own rendered system prompt, and its ``run_started``
(after the copies) names the version and model that continue. A fork point inside a turn
(after a model reply, before all its calls had results) moves back to just before that
reply: the fork's model answers from there. A call whose tool and arguments equal one of
the source's recorded calls (any, also after the fork point) gets that recorded result
(``recorded: true`` on its events, ``ForkJournal.recorded``); other calls follow the
dry-run rule: medium/high-risk ones are not executed.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.db import transaction

from agentweb.runs import agents, lifecycle, versions
from agentweb.runs.errors import ActionError, NotAllowed
from agentweb.runs.journal import DbJournal
from agentweb.runs.models import AgentProfile, Run, RunEvent
from agentweb.runtime.journal import PriorExecution
from agentweb.runtime.loop import Agent
from agentweb.runtime.messages import AssistantMessage, Message, UserMessage
from agentweb.runtime.state import LoopState


class InvalidFork(ActionError):
    """A fork's body names something that is not there (a seq, an agent, a version)."""

    code, status = "invalid_fork", 422


def _key(tool: str, arguments: Any) -> str:
    return tool + "\x00" + json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str)


def recorded_results(source_id: int) -> dict[str, PriorExecution]:
    """What each call of the source run returned, by tool and arguments (the first of
    equal calls)."""
    started: dict[str, str] = {}
    out: dict[str, PriorExecution] = {}
    rows = RunEvent.objects.filter(
        run_id=source_id, type__in=["tool_call_started", "tool_call_finished"]
    ).order_by("seq")
    for kind, data in rows.values_list("type", "data"):
        call_id = str(data.get("call_id", ""))
        if kind == "tool_call_started":
            started[call_id] = _key(str(data.get("tool", "")), data.get("arguments") or {})
            continue
        key = started.get(call_id)
        if key is None or key in out:
            continue
        ok = bool(data.get("ok"))
        out[key] = PriorExecution(
            "succeeded" if ok else "failed", data.get("result"), data.get("error")
        )
    return out


class ForkJournal(DbJournal):
    """The fork's journal: a call equal to one of the source's gets its recorded result."""

    def __init__(self, run: Run, recorded: dict[str, PriorExecution], **kwargs: Any) -> None:
        super().__init__(run, **kwargs)
        self._recorded = recorded

    def recorded(self, tool: str, arguments: dict[str, Any]) -> PriorExecution | None:
        return self._recorded.get(_key(tool, arguments))


def fork_point(source: Run, at_seq: int) -> int:
    """``at_seq``, or the seq just before the model reply whose turn it cuts."""
    events = list(
        RunEvent.objects.filter(run=source).order_by("seq").values_list("seq", "type", "data")
    )
    replies = [(seq, data) for seq, kind, data in events if kind == "model_called"]
    before = [(seq, data) for seq, data in replies if seq <= at_seq]
    if not before:
        return at_seq
    reply_seq, reply = before[-1]
    ids = {str(c.get("id")) for c in reply.get("tool_calls") or []}
    if not ids:
        return at_seq
    settled_by: dict[str, int] = {}  # call id -> the seq of its result or refusal
    for seq, kind, data in events:
        call_id = str(data.get("call_id", ""))
        if call_id not in ids:
            continue
        if kind == "tool_call_finished" or (
            kind == "approval_decided" and data.get("decision") != "approved"
        ):
            settled_by.setdefault(call_id, seq)
    # a call with neither was refused as the reply was planned: settled with it
    if all(settled_by.get(i, reply_seq) <= at_seq for i in ids):
        return at_seq
    return reply_seq - 1


def start_state(run: Run, agent: Agent, context: dict[str, Any]) -> LoopState:
    """The fork's first state: its own system prompt and task, then the source's
    messages after them, up to the fork point's number of model replies."""
    state = agent.start(run.task, context=context)
    assert run.forked_from_id is not None
    source = Run.objects.only("state").get(pk=run.forked_from_id)
    at_seq = run.forked_at_seq or 0
    replies = RunEvent.objects.filter(
        run_id=run.forked_from_id, type="model_called", seq__lte=at_seq
    ).count()
    record: list[Message] = LoopState.from_json(source.state).messages if source.state else []
    first_user = next((i for i, m in enumerate(record) if isinstance(m, UserMessage)), None)
    kept: list[Message] = []
    seen = 0
    for message in record[(first_user + 1) if first_user is not None else len(record) :]:
        if isinstance(message, AssistantMessage):
            seen += 1
            if seen > replies:
                break
        kept.append(message)
    state.messages.extend(kept)
    state.iteration = replies
    state.seen_call_ids = [
        c.id for m in kept if isinstance(m, AssistantMessage) for c in m.tool_calls
    ]
    return state


def do_fork(
    source: Run,
    *,
    user: Any,
    at_seq: int | None = None,
    agent_name: str | None = None,
    version: int | None = None,
    model: str | None = None,
) -> Run:
    """A dry run that continues ``source`` (which ``user`` sees: the caller looked it up
    through ``Run.objects.visible_to``) from ``at_seq`` (inclusive; default its last event)
    with ``agent_name``'s ``version`` (default: its newest) and ``model`` (default: that
    version's, else the installation's). Refuses, creating nothing, a seq past the end,
    an unknown agent, version or model."""
    if not user.has_perm("runs.add_run"):
        raise NotAllowed("you may not start runs")
    last = source.last_seq
    point = last if at_seq is None else at_seq
    if point < 1 or point > last:
        raise InvalidFork(
            f"at_seq {point} is outside run {source.pk}'s events (1 to {last})"
            if last
            else f"run {source.pk} has no events yet to fork from"
        )
    profile = AgentProfile.objects.filter(name=agent_name).first() if agent_name else source.agent
    if profile is None:
        known = ", ".join(AgentProfile.objects.order_by("name").values_list("name", flat=True))
        raise InvalidFork(f"unknown agent {agent_name!r}; known agents: {known or 'none'}")
    if version is not None:
        try:
            chosen = versions.get(profile, version)
        except ActionError as exc:
            raise InvalidFork(exc.message) from None
    else:
        chosen = versions.current(profile)
    if model is not None:
        problem = agents.model_problem(model)
        if problem:
            raise InvalidFork(f"model: {problem}")
    spec = model or chosen.data.get("model") or settings.AGENTWEB_MODEL
    point = fork_point(source, point)
    with transaction.atomic():
        run = lifecycle.create(
            task=source.task,
            agent=profile,
            agent_version=chosen.n,
            mode=Run.Mode.DRY,
            model=spec,
            ticket_id=source.ticket_id,
            created_by=user,
            forked_from=source,
            forked_at_seq=point,
        )
        copies = [
            RunEvent(run=run, seq=seq, type=kind, data=data)
            for seq, kind, data in RunEvent.objects.filter(run=source, seq__lte=point)
            .order_by("seq")
            .values_list("seq", "type", "data")
        ]
        RunEvent.objects.bulk_create(copies)
        Run.objects.filter(pk=run.pk).update(last_seq=point)
        run.last_seq = point
    return run
