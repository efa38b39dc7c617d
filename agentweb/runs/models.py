"""Runs and everything recorded about them. PostgreSQL is the only source of truth."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any, TypedDict

from django.conf import settings
from django.contrib.postgres.indexes import GinIndex, OpClass
from django.core.exceptions import ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models

from agentweb.observability.ids import new_span_id, new_trace_id, tool_span_id
from agentweb.runs import profile_rules
from agentweb.runs.toolset import risk_of
from agentweb.runtime import events as ev
from agentweb.teams.scope import scope_for


def arguments_hash(arguments: dict[str, Any]) -> str:
    """Stable hash of tool arguments (key order and whitespace do not matter)."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), cls=DjangoJSONEncoder)
    return hashlib.sha256(canonical.encode()).hexdigest()


class AgentProfile(models.Model):
    name = models.SlugField(max_length=60, unique=True)
    description = models.CharField(max_length=300, blank=True)
    system_prompt = models.TextField(
        help_text="Template; variables: {{user}}, {{now}}, {{ticket}}, {{customer}}, {{tools}}"
    )
    model = models.CharField(
        max_length=120, blank=True, help_text="Blank: the installation's AGENTWEB_MODEL"
    )
    allowed_tools = models.JSONField(
        default=list,
        blank=True,
        # No angle brackets: the admin shows help texts as HTML.
        help_text="Tool names; an MCP server's as server__tool (crm__lookup), or all of "
        "them as crm__*. Empty: every tool of the AGENTWEB_TOOLS modules, no MCP server's",
    )
    max_iterations = models.PositiveSmallIntegerField(default=20)
    risk_overrides = models.JSONField(
        default=dict, blank=True, help_text='{"tool": "low"|"medium"|"high"}'
    )
    approval_policies = models.JSONField(
        default=dict,
        blank=True,
        help_text='{"tool": "always"|"never"|{"argument": "amount", "at_least": 20}}',
    )
    context_budget_tokens = models.PositiveIntegerField(default=16000)
    tool_selection = models.CharField(
        max_length=10,
        default="all",
        help_text='"all": offer exactly the allowed tools; a number N: the N most relevant '
        "plus search_tools",
    )
    validator = models.CharField(
        max_length=200,
        blank=True,
        help_text="Dotted path of a completion validator(answer, state); blank: none",
    )
    delegates = models.JSONField(
        default=list, blank=True, help_text="Profile names this one may hand work to"
    )
    vision = models.BooleanField(default=True, help_text="Send images in tool results")
    budget = models.JSONField(
        default=dict,
        blank=True,
        help_text='{"max_cost_usd_per_run"?, "max_tokens_per_run"?, "daily_cost_usd"?}; '
        "sub-runs count toward their top run; a day is the installation's TIME_ZONE day",
    )
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return self.name

    @property
    def top_n(self) -> int | None:
        """Tools offered per model call (None: every allowed tool, no search_tools)."""
        value = str(self.tool_selection).strip()
        if value.isascii() and value.isdecimal():  # not str.isdigit: int("²") raises
            return int(value) or None
        return None

    def clean(self) -> None:
        # The one place profile fields are checked: the admin, the /agents/ form, the
        # API and `agents import` all call full_clean(). The checks that need the loaded
        # tools or the environment live in agentweb.runs.profile_rules.
        errors: dict[str, str] = profile_rules.profile_errors(self)
        if not isinstance(self.allowed_tools, list) or not all(
            isinstance(name, str) for name in self.allowed_tools
        ):
            errors["allowed_tools"] = 'a list of tool names, e.g. ["get_order", "search_kb"]'
        if not isinstance(self.risk_overrides, dict) or not all(
            value in ("low", "medium", "high") for value in self.risk_overrides.values()
        ):
            errors["risk_overrides"] = 'an object of tool: "low" | "medium" | "high"'
        policy_error = profile_rules.policy_errors(
            self.approval_policies, lambda tool: risk_of(tool, self)
        )
        if policy_error and "approval_policies" not in errors:  # an unknown tool: said so
            errors["approval_policies"] = policy_error
        delegates = self.delegates
        if not isinstance(delegates, list) or not all(isinstance(n, str) for n in delegates):
            errors["delegates"] = 'a list of agent profile names, e.g. ["billing-specialist"]'
        elif delegates:
            known = set(
                AgentProfile.objects.filter(name__in=delegates).values_list("name", flat=True)
            )
            unknown = [n for n in delegates if n not in known and n != self.name]
            if unknown:
                errors["delegates"] = f"unknown agent profiles: {', '.join(unknown)}"
        if errors:
            raise ValidationError(errors)


class ProfileVersion(models.Model):
    """One save of an agent profile, never changed afterwards (DESIGN §14): ``n`` counts
    1, 2, … per profile; ``data`` is the profile's JSON as ``GET /api/agents/{name}``
    gave it then (without ``updated_at``). A database trigger refuses updates
    (migration 0013); deleting the profile deletes its versions."""

    profile = models.ForeignKey(AgentProfile, on_delete=models.CASCADE, related_name="versions")
    n = models.PositiveIntegerField()
    data = models.JSONField(encoder=DjangoJSONEncoder)
    saved_at = models.DateTimeField(auto_now_add=True)
    saved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    #: the version this one restored, if it is a restore
    restored_from = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["profile", "-n"]
        constraints = [
            models.UniqueConstraint(fields=["profile", "n"], name="profileversion_n_unique")
        ]

    def __str__(self) -> str:
        return f"{self.profile_id} v{self.n}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise ValueError("profile versions are immutable")
        super().save(*args, **kwargs)

    def as_json(self) -> dict[str, Any]:
        return {
            "version": self.n,
            "saved_at": self.saved_at.isoformat(),
            "saved_by": self.saved_by.get_username() if self.saved_by else None,
            "restored_from": self.restored_from,
            "profile": self.data,
        }


class RunQuerySet(models.QuerySet["Run"]):
    def visible_to(self, user: Any) -> RunQuerySet:
        """The runs ``user`` may see: with ``view_all_runs`` all of them, or once teams
        exist their teams' (on their queues' tickets, or without a ticket and started by
        a teammate) and those they started; without it only their own
        (``agentweb/teams/scope.py``)."""
        return self.select_related("agent", "created_by").filter(scope_for(user).runs())


#: ``final_answer`` of a run in a list is cut to this many characters.
SUMMARY_CHARS = 300


class RunJson(TypedDict):
    """A run in the JSON API (``Run.as_json``)."""

    id: int
    status: str
    task: str
    agent: str
    model: str
    ticket: int | None
    final_answer: str | None
    final_answer_truncated: bool
    failure_reason: str | None
    created_by: str
    created_at: str
    started_at: str | None
    finished_at: str | None
    last_seq: int
    usage: dict[str, Any]
    actions: list[dict[str, Any]]
    parent_id: int | None
    children: list[int]
    trace_id: str
    agent_version: int | None
    mode: str
    forked_from: dict[str, int] | None


class Run(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        WAITING_APPROVAL = "waiting_approval"
        WAITING_SUBTASKS = "waiting_subtasks"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"

    class Mode(models.TextChoices):
        NORMAL = "normal"
        DRY = "dry"  # medium/high-risk tools never execute (DESIGN §14)

    ACTIVE = (Status.QUEUED, Status.RUNNING, Status.WAITING_APPROVAL, Status.WAITING_SUBTASKS)
    FINAL = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)

    task = models.TextField()
    agent = models.ForeignKey(AgentProfile, on_delete=models.PROTECT, related_name="runs")
    model = models.CharField(max_length=120, blank=True)
    ticket = models.ForeignKey(
        "tickets.Ticket", null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="runs"
    )
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED)
    final_answer = models.TextField(blank=True)
    failure_reason = models.TextField(blank=True)
    decided_by = models.CharField(max_length=20, blank=True)
    usage = models.JSONField(default=dict, blank=True)
    state = models.JSONField(null=True, blank=True, encoder=DjangoJSONEncoder)
    last_seq = models.PositiveIntegerField(default=0)
    cancel_requested = models.BooleanField(default=False)
    lease_owner = models.CharField(max_length=100, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    # Delegation: a child run is an ordinary run with a parent.
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="children"
    )
    root = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="descendants"
    )
    depth = models.PositiveSmallIntegerField(default=1)
    parent_call_id = models.CharField(max_length=120, blank=True)
    awaiting_tasks = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # One OpenTelemetry trace per run across pauses, resumes and workers:
    # every span of the run is a child of the root span whose id is stored here.
    trace_id = models.CharField(max_length=32, default=new_trace_id, editable=False)
    trace_span_id = models.CharField(max_length=16, default=new_span_id, editable=False)
    trace_parent_span_id = models.CharField(max_length=16, blank=True, editable=False)
    # DESIGN §14: the profile version the run runs (ProfileVersion.n), normal or dry, and
    # the run (and the seq in it) a fork continues from.
    agent_version = models.PositiveIntegerField(null=True, blank=True)
    mode = models.CharField(max_length=10, choices=Mode.choices, default=Mode.NORMAL)
    forked_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="forks"
    )
    forked_at_seq = models.PositiveIntegerField(null=True, blank=True)

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        permissions = [
            ("cancel_run", "Can cancel runs"),
            ("view_all_runs", "Can see runs started by others"),
        ]
        indexes = [models.Index(fields=["status", "lease_expires_at"])]
        constraints = [
            models.UniqueConstraint(
                fields=["parent", "parent_call_id"],
                condition=models.Q(parent__isnull=False),
                name="run_child_per_call_unique",
            )
        ]

    def __str__(self) -> str:
        return f"run {self.pk} ({self.status})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self._state.adding and self.parent_id and not self.trace_parent_span_id:
            # A child run is in its parent's trace, under the span of the delegating call.
            parent = Run.objects.only("trace_id", "trace_span_id").get(pk=self.parent_id)
            self.trace_id = parent.trace_id
            self.trace_parent_span_id = (
                tool_span_id(parent.trace_id, self.parent_call_id)
                if self.parent_call_id
                else parent.trace_span_id
            )
        super().save(*args, **kwargs)

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE

    @property
    def is_dry(self) -> bool:
        return self.mode == self.Mode.DRY

    def actions(self) -> list[dict[str, Any]]:
        """Every medium/high-risk call of this run with its fate (``actions_of``)."""
        return actions_of(
            self,
            Approval.objects.filter(run=self).only("call_id", "tool", "status", "requested_at"),
            ToolExecution.objects.filter(run=self).only("call_id", "tool", "status", "started_at"),
        )

    @property
    def top_id(self) -> int:
        """The id of the top-level run of this run's tree (its own for a top-level run)."""
        return self.root_id or self.pk

    def as_json(
        self,
        actions: list[dict[str, Any]] | None = None,
        children: list[int] | None = None,
        summary: bool = False,
    ) -> RunJson:
        """The run in the JSON API. ``actions`` and ``children`` when already read for a
        page of runs; ``summary`` (lists): the final answer cut to ``SUMMARY_CHARS``,
        from an ``answer_head`` annotation so the whole answer never leaves the database."""
        if children is None:
            children = list(self.children.order_by("pk").values_list("pk", flat=True))
        if summary:
            head = getattr(self, "answer_head", "") or ""
            answer: str | None = head[:SUMMARY_CHARS] or None
            truncated = len(head) > SUMMARY_CHARS
        else:
            answer, truncated = self.final_answer or None, False
        return {
            "id": self.pk,
            "status": self.status,
            "task": self.task,
            "agent": self.agent.name,
            "model": self.model,
            "ticket": self.ticket_id,
            "final_answer": answer,
            "final_answer_truncated": truncated,
            "failure_reason": self.failure_reason or None,
            "created_by": self.created_by.get_username(),
            "created_at": self.created_at.isoformat(),
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "last_seq": self.last_seq,
            "usage": self.usage or {},
            "actions": self.actions() if actions is None else actions,
            "parent_id": self.parent_id,
            "children": children,
            "trace_id": self.trace_id,
            "agent_version": self.agent_version,
            "mode": self.mode,
            "forked_from": (
                {"run": self.forked_from_id, "at_seq": self.forked_at_seq or 0}
                if self.forked_from_id
                else None
            ),
        }


class RunEvent(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveIntegerField()
    type = models.CharField(max_length=40)
    data = models.JSONField(default=dict, encoder=DjangoJSONEncoder)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="runevent_seq_unique")]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} {self.type}"

    def as_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "type": self.type, "at": self.at.isoformat(), "data": self.data}

    def as_event(self) -> ev.Event:
        """The runtime's typed event this row stores (``events.parse``); raises
        ``events.EventShapeError`` when its data does not fit its type."""
        return ev.parse(self.type, self.data)


class RunImage(models.Model):
    """An image a tool returned during a run, stored once; events refer to it by URL."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="images")
    sha256 = models.CharField(max_length=64)
    media_type = models.CharField(max_length=40)
    width = models.PositiveIntegerField(null=True, blank=True)
    height = models.PositiveIntegerField(null=True, blank=True)
    size = models.PositiveIntegerField()
    data = models.BinaryField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "sha256"], name="runimage_once_per_run")
        ]

    def __str__(self) -> str:
        return f"run {self.run_id} image {self.sha256[:12]}"


class GroupKeys(models.Func):
    """``runs_group_keys(arguments)``, an SQL function (migration 0008): each top-level
    argument's value as ``runtime.approvals.group_key`` writes it when that is exact in
    SQL (a string of at most 200 ASCII characters: trimmed of whitespace, A-Z in lower
    case), ``"*"`` for any other value (not a string, longer, or non-ASCII, which Python's
    case folding may still match to an ASCII one). GIN-indexed: the rows of a ``sum_per``
    total are ``keys @> {arg: key}`` or ``keys @> {arg: "*"}``, found without reading every
    row of the tool; ``group_key`` in Python has the last word on each."""

    function = "runs_group_keys"
    output_field = models.JSONField()


class ToolExecution(models.Model):
    class Status(models.TextChoices):
        STARTED = "started"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        UNKNOWN = "unknown"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="executions")
    call_id = models.CharField(max_length=120)
    tool = models.CharField(max_length=100)
    arguments = models.JSONField(default=dict, encoder=DjangoJSONEncoder)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.STARTED)
    result = models.JSONField(null=True, blank=True, encoder=DjangoJSONEncoder)
    error = models.TextField(blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.FloatField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "call_id"], name="toolexecution_call_unique")
        ]
        indexes = [
            GinIndex(
                OpClass(GroupKeys("arguments"), name="jsonb_path_ops"),
                name="toolexecution_group_keys",
            )
        ]

    def __str__(self) -> str:
        return f"{self.tool} {self.call_id} ({self.status})"


class ApprovalQuerySet(models.QuerySet["Approval"]):
    def visible_to(self, user: Any) -> ApprovalQuerySet:
        """The approvals of the runs ``user`` may see (``Run.objects.visible_to``)."""
        return self.filter(scope_for(user).runs(prefix="run__"))

    def decidable_by(self, user: Any) -> ApprovalQuerySet:
        """Pending approvals ``user`` may decide: visible, with the permission, never the
        calls of a run they started (four-eyes; ``actions.may_decide`` says the same)."""
        if not user.is_authenticated or not user.has_perm("runs.decide_approval"):
            return self.none()
        return (
            self.visible_to(user)
            .filter(status=Approval.Status.PENDING)
            .exclude(run__created_by=user)
        )


class Approval(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        REJECTED = "rejected"
        EXPIRED = "expired"
        CANCELLED = "cancelled"  # its run was cancelled before anyone decided

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="approvals")
    call_id = models.CharField(max_length=120)
    tool = models.CharField(max_length=100)
    arguments = models.JSONField(default=dict, encoder=DjangoJSONEncoder)
    arguments_hash = models.CharField(max_length=64)
    risk = models.CharField(max_length=10)
    reason = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    comment = models.TextField(blank=True)
    edited_arguments = models.JSONField(null=True, blank=True, encoder=DjangoJSONEncoder)
    approved_hash = models.CharField(max_length=64, blank=True)
    requested_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    # A quorum: this many distinct people (none the run's starter) approve before it runs
    # (a policy's "approvers"); each approval is an ApprovalVote.
    approvals_needed = models.PositiveSmallIntegerField(default=1)

    objects = ApprovalQuerySet.as_manager()

    class Meta:
        ordering = ["requested_at"]
        permissions = [("decide_approval", "Can approve or reject tool calls")]
        constraints = [
            models.UniqueConstraint(fields=["run", "call_id"], name="approval_call_unique")
        ]
        indexes = [
            models.Index(fields=["status", "requested_at"]),
            # what sum_per totals count: pending and approved calls, as asked or as edited
            GinIndex(
                OpClass(GroupKeys("arguments"), name="jsonb_path_ops"),
                name="approval_arguments_keys",
                condition=models.Q(status__in=["pending", "approved"]),
            ),
            GinIndex(
                OpClass(GroupKeys("edited_arguments"), name="jsonb_path_ops"),
                name="approval_edited_arguments_keys",
                condition=models.Q(status__in=["pending", "approved"]),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tool} for run {self.run_id} ({self.status})"

    def approvals_given(self) -> int:
        """People who approved so far (``votes``, counted in the database unless an
        ``approvals_given_n`` annotation or a prefetch has them)."""
        annotated = getattr(self, "approvals_given_n", None)
        if annotated is not None:
            return int(annotated)
        return self.votes.count()

    @property
    def voter_names(self) -> list[str]:
        """Who approved so far, in order (a quorum's card names them)."""
        return [vote.user.get_username() for vote in self.votes.select_related("user")]

    @property
    def proposal(self) -> dict[str, Any]:
        """The arguments a person approves now: as the model asked, or as a first
        approver of a quorum edited them."""
        return self.edited_arguments or self.arguments

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.pk,
            "run": self.run_id,
            "top_run": self.run.top_id,  # the tree's top-level run (itself when top-level)
            "call_id": self.call_id,
            "tool": self.tool,
            "arguments": self.arguments,
            "risk": self.risk,
            "reason": self.reason,
            "status": self.status,
            "requested_at": self.requested_at.isoformat(),
            "expires_at": self.expires_at.isoformat(),
            "decided_by": self.decided_by.get_username() if self.decided_by else None,
            "decided_at": self.decided_at.isoformat() if self.decided_at else None,
            "comment": self.comment,
            "edited_arguments": self.edited_arguments,
            "approvals_needed": self.approvals_needed,
            "approvals_given": self.approvals_given(),
        }


class ApprovalVote(models.Model):
    """One person's approval of a call: a call runs once ``approvals_needed`` distinct
    people approved it (a rejection rejects it at once, and is on the approval)."""

    approval = models.ForeignKey(Approval, on_delete=models.CASCADE, related_name="votes")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    arguments_hash = models.CharField(max_length=64)  # what this person approved
    edited = models.BooleanField(default=False)
    comment = models.TextField(blank=True)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["at", "pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["approval", "user"], name="approvalvote_once_per_person"
            )
        ]

    def __str__(self) -> str:
        return f"{self.user} approved {self.approval_id}"


class AuditEntry(models.Model):
    """Append-only: rows are created, never changed or deleted through the ORM."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    action = models.CharField(max_length=60)
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    data = models.JSONField(default=dict, encoder=DjangoJSONEncoder)

    class Meta:
        ordering = ["-at"]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.action}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise ValueError("audit entries are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise ValueError("audit entries are append-only")


# --- what became of a run's actions ----------------------------------------------------

#: The risks whose calls are a run's actions.
RISKY = ("medium", "high")


def actions_of(
    run: Run, approvals: Iterable[Approval], executions: Iterable[ToolExecution]
) -> list[dict[str, Any]]:
    """What became of a run's actions: every medium- or high-risk call with its fate, from
    the rows that are the truth for it (its ``Approval`` and ``ToolExecution`` rows), so
    the API, the pages and the exports agree. An entry is ``{"tool", "call_id",
    "status", "approved_by"}``:

    - ``status``: ``pending`` (waiting for a person, or approved and not run yet),
      ``executed``, ``failed`` (it ran and reported an error, or its check refused it),
      ``rejected``, ``expired``, ``cancelled`` (its run ended before it could run);
    - ``approved_by``: ``person`` when a person approved it, ``policy`` when it ran
      without one (a rule or its risk level allowed it), else null.
    """
    by_call: dict[str, dict[str, Any]] = {}
    order: list[tuple[Any, str]] = []
    execs = {e.call_id: e for e in executions}
    for asked in approvals:
        by_call[asked.call_id] = {"tool": asked.tool, "approval": asked}
        order.append((asked.requested_at, asked.call_id))

    def risky(tool: str) -> bool:  # the profile is read only when a call needs it
        return risk_of(tool, run.agent if run.agent_id else None) in RISKY

    for ran in execs.values():
        if ran.call_id in by_call or not risky(ran.tool):
            continue
        by_call[ran.call_id] = {"tool": ran.tool, "approval": None}
        order.append((ran.started_at, ran.call_id))
    final = run.status in Run.FINAL
    out = []
    for _, call_id in sorted(order, key=lambda pair: (pair[0], pair[1])):
        item = by_call[call_id]
        approval: Approval | None = item["approval"]
        execution = execs.get(call_id)
        approved_by: str | None = None
        if approval is None:
            approved_by = "policy"
        elif approval.status == Approval.Status.APPROVED:
            approved_by = "person"
        if approval is not None and approval.status not in (
            Approval.Status.APPROVED,
            Approval.Status.PENDING,
        ):
            status = str(approval.status)  # rejected | expired | cancelled
        elif approval is not None and approval.status == Approval.Status.PENDING:
            status = "cancelled" if final else "pending"
        elif execution is None or execution.status in (
            ToolExecution.Status.STARTED,
            ToolExecution.Status.UNKNOWN,
        ):
            status = "cancelled" if final and execution is None else "pending"
        elif execution.status == ToolExecution.Status.SUCCEEDED:
            status = "executed"
        else:
            status = "failed"
        out.append(
            {"tool": item["tool"], "call_id": call_id, "status": status, "approved_by": approved_by}
        )
    return out


# --- suites and experiments (DESIGN §14) -------------------------------------------------


class Suite(models.Model):
    """Named test cases for agent changes; ``cases`` as ``suites.CreateSuite`` reads them."""

    name = models.CharField(max_length=100, unique=True)
    cases = models.JSONField(default=list, encoder=DjangoJSONEncoder)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Experiment(models.Model):
    """Every case of a suite run as a dry run by one profile version (and model)."""

    suite = models.ForeignKey(Suite, on_delete=models.CASCADE, related_name="experiments")
    agent = models.ForeignKey(AgentProfile, on_delete=models.PROTECT, related_name="+")
    version = models.PositiveIntegerField()
    model = models.CharField(max_length=120, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"experiment {self.pk} of {self.suite_id}"


class ExperimentCase(models.Model):
    """One case of an experiment and the dry run that plays it."""

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="cases")
    index = models.PositiveIntegerField()
    name = models.CharField(max_length=200)
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    error = models.TextField(blank=True)  # why the case could not start

    class Meta:
        ordering = ["experiment", "index"]

    def __str__(self) -> str:
        return f"{self.experiment_id}#{self.index} {self.name}"
