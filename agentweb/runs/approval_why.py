"""Why a tool call waits for a person, in words every approval card shares: the inbox and
the run page (``templates/web/_approval_why.html``) and the email and Slack messages.

``explain(approval)`` gives a ``Why``: the stored ``why`` (what the rule found when the call
was asked for, e.g. "amount on order_id A1001 reaches 20 (total 59.00)"), the rule that
asked, and for a threshold rule this call's amount, with a ``sum_per`` rule also the
total so far (executed, possibly executed and pending calls, this one included, as
``policies.prior_total`` counts them, DESIGN §7). ``Why.lines()`` is the same as plain
text lines, for a mail or a Slack block. Plain strings: templates escape them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from agentweb.runs.models import AgentProfile, Approval, RunEvent
from agentweb.runs.people import split_policy
from agentweb.runs.policies import prior_total
from agentweb.runs.toolset import registry, risk_of

# _limit, _number: the rule's own words for a limit and its reading of a number
from agentweb.runtime.approvals import Threshold, _limit, _number, parse_policy

__all__ = ["Rule", "Why", "asking_rule", "explain", "explain_many"]


@dataclass(frozen=True, slots=True)
class Rule:
    """The rule that asks a person: ``kind`` for code, ``text`` for people."""

    kind: str  # profile_always | profile_threshold | profile_unreadable | risk_override |
    # tool_threshold | tool_rule | high_risk | malformed_arguments | unknown_outcome | unknown
    text: str
    threshold: Threshold | None = None


@dataclass(frozen=True, slots=True)
class Why:
    why: str  # the stored words (empty when the request stored none)
    rule: Rule
    argument: str = ""  # the threshold's argument, e.g. "amount"
    amount: str = ""  # this call's value of it, e.g. "20.00" ("" when not a number)
    group: str = ""  # a sum_per rule's group, e.g. "order_id A1001"
    total: str = ""  # a sum_per rule's total so far, this call included ("" unknown)
    at_least: str = ""  # the threshold, e.g. "20"

    @property
    def headline(self) -> str:
        """One sentence: the stored why, else the rule."""
        return self.why or self.rule.text

    @property
    def figures(self) -> str:
        """This call's amount and the total so far, in words ("" when no rule counts)."""
        if not self.argument:
            return ""
        amount = self.amount or "not a clear number"
        text = f"this call: {self.argument} {amount}"
        if self.group and self.total:
            text += (
                f"; total so far on {self.group}: {self.total} of {self.at_least} "
                "(executed, possibly executed and pending calls, this one included)"
            )
        elif self.at_least:
            text += f" (a person from {self.at_least})"
        return text

    def lines(self) -> list[str]:
        """Plain text for a mail or a chat message: why, the rule, the figures."""
        out = [f"Why: {self.headline}"]
        if self.why:
            out.append(f"Rule: {self.rule.text}")
        if self.figures:
            out.append(self.figures[0].upper() + self.figures[1:])
        return out


def _threshold_words(rule: Threshold) -> str:
    if rule.sum_per:
        return (
            f"a person approves once the {rule.argument} of its calls on one {rule.sum_per} "
            f"adds up to {_limit(rule.at_least)} (earlier calls in any run count)"
        )
    return f"a person approves a call whose {rule.argument} is {_limit(rule.at_least)} or more"


def _tool(name: str) -> Any:
    try:
        return registry().get(name)
    except Exception:  # a broken tool module: the card still says what it can
        return None


def asking_rule(profile: AgentProfile | None, tool_name: str, reason: str = "") -> Rule:
    """The rule that makes a person decide a call of ``tool_name`` under ``profile``, in the
    order the runtime's ``ApprovalGate`` applies them: the profile's policy for the tool,
    a risk override of "high", the tool's own rule, its risk."""
    if reason == "malformed_arguments":
        return Rule(
            reason,
            "the model's arguments could not be read: a person writes or checks them "
            "before the call runs",
        )
    if reason == "unknown_outcome":
        return Rule(
            reason,
            "an earlier attempt stopped mid-call: a person checks whether it happened "
            "before it is tried again",
        )
    name = profile.name if profile is not None else "the profile"
    policies = profile.approval_policies if profile is not None else {}
    overrides = profile.risk_overrides if profile is not None else {}
    policy: Any = None
    if isinstance(policies, dict) and tool_name in policies:
        try:
            policy = parse_policy(split_policy(policies[tool_name])[0])
        except ValueError:
            return Rule("profile_unreadable", f"the profile {name} has an unreadable rule for it")
    if policy == "always":
        return Rule("profile_always", f"the profile {name} asks a person for every {tool_name}")
    if isinstance(policy, Threshold):
        words = f"the profile {name}'s rule for {tool_name}: {_threshold_words(policy)}"
        return Rule("profile_threshold", words, policy)
    override = overrides.get(tool_name) if isinstance(overrides, dict) else None
    if override == "high":
        return Rule(
            "risk_override",
            f"the profile {name} makes {tool_name} high risk: every call needs a person",
        )
    tool = _tool(tool_name)
    own = getattr(tool, "approval", None)
    if isinstance(own, Threshold):
        return Rule("tool_threshold", f"{tool_name}'s own rule: " + _threshold_words(own), own)
    if own is not None:
        return Rule("tool_rule", f"{tool_name}'s own rule asks a person for this call")
    if tool is None or risk_of(tool_name, profile) == "high":  # unknown: fail closed
        return Rule("high_risk", f"{tool_name} is a high-risk tool: every call needs a person")
    return Rule("unknown", f"{tool_name} needs a person's approval")


def explain(approval: Approval, stored_why: str | None = None) -> Why:
    """Why ``approval`` needs a person. ``stored_why``: its request's words when already
    read (``explain_many`` reads them for many at once); None reads them here."""
    if stored_why is None:
        stored_why = _stored_whys([approval]).get(approval.pk, "")
    profile = approval.run.agent if approval.run_id else None
    rule = asking_rule(profile, approval.tool, approval.reason)
    threshold = rule.threshold
    if threshold is None:
        return Why(stored_why, rule)
    args = approval.edited_arguments or approval.arguments
    args = args if isinstance(args, dict) else {}
    amount = _number(args.get(threshold.argument))
    found = Why(
        stored_why,
        rule,
        argument=threshold.argument,
        amount=f"{amount:.2f}" if amount is not None else "",
        at_least=_limit(threshold.at_least),
    )
    group = args.get(threshold.sum_per) if threshold.sum_per else None
    if threshold.sum_per is None or group in (None, ""):
        return found
    total = ""
    if approval.status == "pending":  # a decided call's total is its stored why's
        # Pending calls count, so this one is in the total already.
        so_far = prior_total(approval.tool, threshold.argument, threshold.sum_per, group)
        total = f"{Decimal(str(so_far)):.2f}"
    return Why(
        stored_why,
        rule,
        argument=threshold.argument,
        amount=found.amount,
        group=f"{threshold.sum_per} {group}",
        total=total,
        at_least=found.at_least,
    )


def explain_many(approvals: Iterable[Approval]) -> dict[int, Why]:
    """``explain`` for many approvals (a page of cards), their stored words in one query.
    The approvals' runs and agents should be selected with them."""
    approvals = list(approvals)
    whys = _stored_whys(approvals)
    return {a.pk: explain(a, whys.get(a.pk, "")) for a in approvals}


def _stored_whys(approvals: list[Approval]) -> dict[int, str]:
    """The ``why`` of each approval's ``approval_requested`` event (the latest, when a call
    was asked for again)."""
    wanted = {(a.run_id, a.call_id): a.pk for a in approvals}
    if not wanted:
        return {}
    found: dict[int, str] = {}
    events = (
        RunEvent.objects.filter(type="approval_requested", run_id__in={r for r, _ in wanted})
        .order_by("seq")
        .values_list("run_id", "data")
    )
    for run_id, data in events:
        if not isinstance(data, dict):
            continue
        pk = wanted.get((run_id, str(data.get("call_id", ""))))
        if pk is not None:
            found[pk] = str(data.get("why") or "")
    return found
