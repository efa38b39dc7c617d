"""What a person must know to decide an approval, as a mail or a Slack message gives it:
the call, its run, and why a person is needed (``runs.approval_why``: the stored why, the
rule that asked, and for a ``sum_per`` rule this call's amount and the total so far)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings

from agentweb.runs.approval_why import explain
from agentweb.runs.models import Approval

#: Argument values longer than this are cut in mails and Slack messages.
MAX_VALUE_CHARS = 500


@dataclass(frozen=True)
class ApprovalCard:
    approval_id: int
    run_id: int
    agent: str
    starter: str
    task: str  # the run's task, cut
    tool: str
    arguments: list[tuple[str, str]]  # (name, value as text), values cut
    risk: str
    why: str  # why a person must decide: the stored why, else the rule
    rule: str  # the rule that asked
    figures: str  # a threshold rule's: this call's amount and a sum_per rule's total so far
    needed: int  # approvals needed (quorum)
    given: int  # approvals given so far
    requested_at: datetime
    expires_at: datetime
    status: str

    @property
    def run_url(self) -> str:
        return f"{settings.AGENTWEB_SITE_URL}/runs/{self.run_id}/"

    @property
    def approval_url(self) -> str:
        return f"{settings.AGENTWEB_SITE_URL}/approvals/{self.approval_id}/"

    @property
    def total_line(self) -> str:
        return self.figures[:1].upper() + self.figures[1:]

    @property
    def progress(self) -> str | None:
        """ "1 of 2" while a quorum is being gathered."""
        return f"{self.given} of {self.needed}" if self.needed > 1 else None


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS] + "… (cut)"


def approval_card(approval: Approval, *, needed: int = 1, given: int = 0) -> ApprovalCard:
    """The card of ``approval`` (its run and agent selected with it), in the words every
    card shares (``runs.approval_why``)."""
    run = approval.run
    why = explain(approval)
    arguments = approval.edited_arguments or approval.arguments or {}
    task = run.task if len(run.task) <= 300 else run.task[:300] + "…"
    return ApprovalCard(
        approval_id=approval.pk,
        run_id=run.pk,
        agent=run.agent.name,
        starter=run.created_by.get_username(),
        task=task,
        tool=approval.tool,
        arguments=[(str(k), _text(v)) for k, v in arguments.items()],
        risk=approval.risk,
        why=why.headline,
        rule=why.rule.text,
        figures=why.figures,
        needed=needed,
        given=given,
        requested_at=approval.requested_at,
        expires_at=approval.expires_at,
        status=approval.status,
    )
