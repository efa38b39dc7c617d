"""Who must look at a tool call before it runs, and, when nobody must, why not.

A policy for a tool is ``"always"``, ``"never"``, or a threshold rule on one numeric
argument::

    {"argument": "amount", "at_least": 20, "sum_per": "account_id"}

With ``sum_per`` the threshold is on a *total*: this call's value plus every earlier
call of the same tool with the same value of the ``sum_per`` argument — earlier calls in
the same model reply (counted here) and earlier executed or pending calls anywhere (the
host answers them through a ``PriorTotal`` callable; this module knows no database).
Splitting one large action into small ones therefore does not dodge a person.

Anything unreadable fails closed: a person decides.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Protocol

__all__ = [
    "ApprovalGate",
    "Gated",
    "PriorTotal",
    "Threshold",
    "Verdict",
    "group_key",
    "parse_policy",
]

#: ``prior_total(tool, argument, sum_per, value)``: the total of ``argument`` over earlier
#: executed or pending calls of ``tool`` whose ``sum_per`` argument equals ``value``.
PriorTotal = Callable[[str, str, str, Any], float]


@dataclass(frozen=True, slots=True)
class Threshold:
    argument: str
    at_least: float
    sum_per: str | None = None

    @classmethod
    def from_json(cls, rule: Mapping[str, Any]) -> Threshold:
        keys = set(rule)
        if not {"argument", "at_least"} <= keys <= {"argument", "at_least", "sum_per"}:
            raise ValueError('a rule is {"argument": ..., "at_least": ..., "sum_per"?: ...}')
        argument, at_least, sum_per = rule["argument"], rule["at_least"], rule.get("sum_per")
        if not isinstance(argument, str) or not argument:
            raise ValueError("argument must name one of the tool's arguments")
        if isinstance(at_least, bool) or not isinstance(at_least, int | float):
            raise ValueError("at_least must be a number")
        if not math.isfinite(at_least):
            raise ValueError("at_least must be a finite number")
        if sum_per is not None and (not isinstance(sum_per, str) or not sum_per):
            raise ValueError("sum_per must name one of the tool's arguments")
        return cls(argument, float(at_least), sum_per)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"argument": self.argument, "at_least": self.at_least}
        if self.sum_per:
            out["sum_per"] = self.sum_per
        return out


Policy = str | Threshold  # "always" | "never" | a threshold


class Gated(Protocol):
    """What the gate reads of a tool (``tools.Tool`` is one): its name and its own rule,
    a predicate over the arguments (True: a person decides) or a threshold."""

    @property
    def name(self) -> str: ...

    @property
    def approval(self) -> Callable[[dict[str, Any]], bool] | Threshold | None: ...


def parse_policy(rule: Any) -> Policy | None:
    """A policy from its JSON form; None for "default" (the tool's own rule applies).
    Raises ``ValueError`` for anything else."""
    if rule is None or rule == "default":
        return None
    if rule in ("always", "never"):
        return str(rule)
    if isinstance(rule, Threshold):
        return rule
    if isinstance(rule, Mapping):
        return Threshold.from_json(rule)
    raise ValueError('a policy is "always", "never", "default" or a threshold rule')


@dataclass(frozen=True, slots=True)
class Verdict:
    person: bool
    code: str  # "policy" (a rule decided) | "high_risk" (the risk level decided)
    reason: str  # in words: why a person must decide, or why nobody must


def group_key(value: Any) -> str:
    """Values of a ``sum_per`` argument that name the same thing (case, spaces)."""
    return str(value).strip().casefold()


def _number(value: Any) -> Decimal | None:
    if isinstance(value, bool):
        return None
    try:
        number = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None
    return number if number.is_finite() else None


def _fmt(number: float | Decimal) -> str:
    return f"{Decimal(str(number)):.2f}"


def _limit(number: float) -> str:
    return f"{number:g}" if float(number).is_integer() else _fmt(number)


class ApprovalGate:
    """Decides per call; ``in_turn`` carries the totals of the reply being planned."""

    def __init__(
        self,
        policies: Mapping[str, Any] | None = None,
        prior_total: PriorTotal | None = None,
    ) -> None:
        self.policies: dict[str, Policy | ValueError | None] = {}
        for name, rule in (policies or {}).items():
            try:
                self.policies[name] = parse_policy(rule)
            except ValueError as exc:
                self.policies[name] = exc  # fails closed when used
        self.prior_total = prior_total

    def verdict(
        self,
        tool: Gated,
        args: Mapping[str, Any],
        risk: str,
        override: str | None,
        in_turn: dict[tuple[str, str], Decimal],
    ) -> Verdict:
        name = tool.name
        policy = self.policies.get(name)
        if isinstance(policy, ValueError):
            return Verdict(True, "policy", f"the profile's rule for {name} is unreadable")
        if policy == "always":
            return Verdict(True, "policy", f"the profile asks a person for every {name} call")
        if policy == "never":
            return Verdict(False, "policy", f"the profile lets {name} run without approval")
        if isinstance(policy, Threshold):
            return self._threshold(name, policy, args, in_turn)
        if override == "high":
            return Verdict(True, "high_risk", "high risk")
        own = tool.approval
        if isinstance(own, Threshold):
            return self._threshold(name, own, args, in_turn)
        if own is not None:
            try:
                needed = bool(own(dict(args)))
            except Exception:
                needed = True  # a failing rule asks (fail closed)
            if needed:
                return Verdict(True, "policy", f"the rule of {name} asks a person")
            return Verdict(False, "policy", f"the rule of {name} needs no person for this call")
        if risk == "high":
            return Verdict(True, "high_risk", "high risk")
        return Verdict(False, "high_risk", f"{risk} risk: runs without approval")

    def total_key(
        self, tool: Gated, args: Mapping[str, Any], override: str | None
    ) -> tuple[str, str] | None:
        """The (tool, group) whose total decides this call, or None when no total does
        (no ``sum_per`` rule applies, or the call has no group: a person decides)."""
        rule = self._summed_rule(tool, override)
        if rule is None or rule.sum_per is None:
            return None
        group = args.get(rule.sum_per)
        if group is None or group == "":
            return None
        return (tool.name, group_key(group))

    def recount(
        self,
        tool: Gated,
        args: Mapping[str, Any],
        override: str | None,
        in_turn: dict[tuple[str, str], Decimal],
    ) -> Verdict | None:
        """The verdict of the call's ``sum_per`` rule on the totals as they are now (None
        when no total decides it). The host calls it again when the call is recorded,
        serialised with every other call on the same (tool, group): calls planned at the
        same time in other runs could each have counted the other as zero."""
        rule = self._summed_rule(tool, override)
        if rule is None:
            return None
        return self._threshold(tool.name, rule, args, in_turn)

    def _summed_rule(self, tool: Gated, override: str | None) -> Threshold | None:
        """The ``sum_per`` rule ``verdict`` applies to ``tool``, if that is what decides."""
        policy = self.policies.get(tool.name)
        if policy is None and override != "high":
            policy = tool.approval if isinstance(tool.approval, Threshold) else None
        if isinstance(policy, Threshold) and policy.sum_per is not None:
            return policy
        return None

    def _threshold(
        self,
        name: str,
        rule: Threshold,
        args: Mapping[str, Any],
        in_turn: dict[tuple[str, str], Decimal],
    ) -> Verdict:
        amount = _number(args.get(rule.argument))
        if amount is None:
            return Verdict(True, "policy", f"{rule.argument} is not a clear number")
        if amount < 0:
            return Verdict(True, "policy", f"{rule.argument} is negative")
        limit = _limit(rule.at_least)
        if rule.sum_per is None:
            if amount >= Decimal(str(rule.at_least)):
                return Verdict(True, "policy", f"{rule.argument} {_fmt(amount)} reaches {limit}")
            return Verdict(False, "policy", f"{rule.argument} {_fmt(amount)} below {limit}")
        group = args.get(rule.sum_per)
        if group is None or group == "":
            return Verdict(True, "policy", f"no {rule.sum_per} to add the {rule.argument} up by")
        key = (name, group_key(group))
        same_reply = in_turn.get(key, Decimal(0))
        earlier = Decimal(0)
        if self.prior_total is not None:
            try:
                earlier = Decimal(str(self.prior_total(name, rule.argument, rule.sum_per, group)))
            except Exception:
                return Verdict(True, "policy", f"earlier {name} calls could not be added up")
        total = amount + same_reply + earlier
        in_turn[key] = same_reply + amount  # a later call of this reply counts this one
        where = f"{rule.sum_per} {group}"
        if total >= Decimal(str(rule.at_least)):
            return Verdict(
                True, "policy", f"{rule.argument} on {where} reaches {limit} (total {_fmt(total)})"
            )
        return Verdict(
            False, "policy", f"{rule.argument} below {limit} on {where} (total {_fmt(total)})"
        )
