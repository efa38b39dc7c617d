"""Small filters for the pages. All return plain strings; templates escape them."""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any

from django import template
from django.utils import timezone
from django.utils.html import format_html

from agentweb.runs import toolset as _toolset
from agentweb.runs.event_text import pretty as _pretty
from agentweb.runtime import trace as _trace
from agentweb.web import outcome as _outcome

register = template.Library()


@register.filter
def pretty(value: Any) -> str:
    return _pretty(value)


@register.filter
def ms(value: Any) -> str:
    """Milliseconds for people: 840 ms, 1.2 s, 2 min 3 s."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "—"
    if number < 1000:
        return f"{number:.0f} ms"
    if number < 60_000:
        return f"{number / 1000:.1f} s"
    minutes, seconds = divmod(int(number / 1000), 60)
    return f"{minutes} min {seconds} s"


@register.filter
def duration(value: Any) -> str:
    """Milliseconds as a compact duration: <1s, 12s, 1m 14s, 2h 03m."""
    try:
        seconds = float(value) / 1000
    except (TypeError, ValueError):
        return "—"
    if not math.isfinite(seconds):
        return "—"
    if seconds < 1:
        return "<1s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02d}s"
    return f"{whole // 3600}h {(whole % 3600) // 60:02d}m"


@register.filter
def seconds(value: Any) -> str:
    """Milliseconds as seconds with one decimal (0.2 s, 12.5 s): relative step times."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "—"
    if not 0 <= number < float("inf"):
        return "—"
    if number >= 60_000:
        return duration(number)
    return f"{number / 1000:.1f} s"


@register.filter
def usd(value: Any) -> str:
    """Dollars; "—" when the price is unknown (None), never an invented figure."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "—"
    if not math.isfinite(number):
        return "—"
    if number == 0:
        return "$0"
    if number < 0.01:
        return f"${number:.4f}"
    return f"${number:.2f}"


@register.filter
def since(value: datetime | None, until: datetime | None = None) -> str:
    """Elapsed time between two datetimes (until defaults to now), compact."""
    if value is None:
        return "—"
    end = until or timezone.now()
    seconds = max(0, int((end - value).total_seconds()))
    if seconds < 1:
        return "<1s"
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h {(seconds % 3600) // 60:02d}m"
    return f"{seconds // 86400}d {(seconds % 86400) // 3600}h"


@register.filter
def ago(value: datetime | None) -> str:
    """How long ago, for people: "just now", "3 minutes ago", "2 hours ago", "5 days ago"."""
    if value is None:
        return "—"
    seconds = int((timezone.now() - value).total_seconds())
    if seconds < 60:
        return "just now"  # also a clock a little ahead of ours
    for size, unit in ((86400 * 365, "year"), (86400, "day"), (3600, "hour"), (60, "minute")):
        if seconds >= size:
            n = seconds // size
            return f"{n} {unit}{'' if n == 1 else 's'} ago"
    return "just now"


@register.filter
def until(value: datetime | None) -> str:
    if value is None:
        return "—"
    seconds = int((value - timezone.now()).total_seconds())
    if seconds <= 0:
        return "expired"
    return "in " + since(timezone.now(), value)


@register.filter
def in_words(value: Any) -> str:
    """A duration (timedelta or seconds) as people say it: "15 minutes", "1 hour 30
    minutes", "2 days"; never an ISO 8601 "PT15M"."""
    try:
        total = int(value.total_seconds() if hasattr(value, "total_seconds") else float(value))
    except (TypeError, ValueError, OverflowError):
        return ""
    if total <= 0:
        return "a moment"
    parts = []
    for size, unit in ((86400, "day"), (3600, "hour"), (60, "minute"), (1, "second")):
        n, total = divmod(total, size)
        if n:
            parts.append(f"{n} {unit}{'' if n == 1 else 's'}")
    return " ".join(parts[:2])


@register.filter
def get(mapping: Any, key: Any) -> Any:
    try:
        return mapping.get(key)
    except AttributeError:
        return None


@register.simple_tag(takes_context=True)
def query(context: Any, **changes: Any) -> str:
    """The current query string with some parameters changed (for pagination links)."""
    params = context["request"].GET.copy()
    for key, value in changes.items():
        if value in (None, ""):
            params.pop(key, None)
        else:
            params[key] = value
    return params.urlencode()


@register.filter
def fields(value: Any) -> list[tuple[str, str]] | None:
    """A dict of arguments as (name, text) pairs: strings as written (newlines kept),
    anything else as pretty JSON. None when the value is not a dict."""
    if not isinstance(value, dict):
        return None
    return [(str(k), v if isinstance(v, str) else _pretty(v)) for k, v in value.items()]


@register.filter
def break_points(value: Any) -> list[str]:
    """A dotted path or model string in pieces a line may break after (the template puts
    a ``<wbr>`` between them): ``agentweb.`` ``shop.`` ``validators.`` ``claims_validator``."""
    return re.findall(r"[^.:/]*[.:/]|[^.:/]+$", str(value or "")) or [""]


@register.filter
def missing_tools(profile: Any) -> list[str]:
    """The tools an agent profile names that this installation does not load."""
    try:
        return _toolset.missing_tools(profile)
    except Exception:  # a broken tool module must not take the page down
        return []


@register.filter
def sent_count(sent: Any) -> int:
    """How many messages a model call was sent (its stored ``sent``)."""
    return _trace.sent_count(sent)


@register.filter
def total_tokens(usage: Any) -> int:
    if not isinstance(usage, dict):
        return 0
    try:
        return int(usage.get("input_tokens") or 0) + int(usage.get("output_tokens") or 0)
    except (TypeError, ValueError):
        return 0


@register.filter
def oneline(value: Any) -> str:
    """A compact one-line preview of a JSON value."""
    if isinstance(value, str):
        return " ".join(value.split())
    import json

    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)


APPROVAL_REASONS = {
    "high_risk": "high-risk tool",
    "policy": "an approval rule asks for a person",
    "malformed_arguments": "the model's arguments could not be read",
    "unknown_outcome": "an earlier attempt stopped mid-call; check whether it happened",
}


@register.filter
def approval_reason(value: Any) -> str:
    """Why a call waits for a person, in words (unknown codes are shown as they are)."""
    return APPROVAL_REASONS.get(str(value), str(value))


@register.filter
def status_label(status: Any) -> str:
    """A run status in words ("Waiting on approver")."""
    return _outcome.status_label(str(status or ""))


@register.simple_tag
def run_badge(
    run: Any,
    outcomes: Any = None,
    href: str = "",
    extra: str = "",
    dom_id: str = "",
    numbered: bool = False,
) -> str:
    """A run's status badge, live (``data-run-status``): "Needs follow-up" instead of
    "Succeeded" when an action was rejected, failed or expired (``outcomes``: the run's,
    from ``outcome.for_runs``). ``numbered``: "#<id> " before the label (kept when it
    changes live); ``href`` makes it a link; ``extra``: more classes; ``dom_id``: its id."""
    state = _outcome.run_state(str(getattr(run, "status", "") or ""), outcomes)
    prefix = f"#{getattr(run, 'pk', '')} " if numbered else ""
    tag = "a" if href else "span"
    badge = _status_badge(run, state, prefix, tag, href, extra, dom_id)
    dry = dry_badge(run)  # '' (not safe) for a normal run: nothing to add
    return badge + dry if dry else badge


#: Beside every status badge of a dry run (DESIGN §14): nothing it would do was done.
_DRY_HINT = (
    "a dry run: medium- and high-risk tools were not executed; each call is recorded with "
    "what it would have done"
)


@register.simple_tag
def dry_badge(run: Any) -> str:
    """The "dry run" label of a dry run ('' for any other)."""
    if getattr(run, "mode", "") != "dry":
        return ""
    return format_html(' <span class="badge dry" title="{}">dry run</span>', _DRY_HINT)


def _status_badge(
    run: Any, state: Any, prefix: str, tag: str, href: str, extra: str, dom_id: str
) -> str:
    return format_html(
        '<{}{}{} class="badge status-{}{}" data-run-status="{}"{}{}>{}{}</{}>',
        tag,
        format_html(' href="{}"', href) if href else "",
        format_html(' id="{}"', dom_id) if dom_id else "",
        state.css,
        f" {extra}" if extra else "",
        getattr(run, "pk", ""),
        format_html(' data-prefix="{}"', prefix) if prefix else "",
        format_html(' title="{}"', state.hint) if state.hint else "",
        prefix,
        state.label,
        tag,
    )


def _value_text(value: Any) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.2f}" if value == value and round(value, 2) == value else repr(value)
    if isinstance(value, str):
        return value
    return _pretty(value)


@register.filter
def arg_changes(approval: Any) -> list[tuple[str, str, str]]:
    """What a person changed when approving with edited arguments: (name, before, after)
    for each argument that differs, in the order of the asked arguments."""
    edited = getattr(approval, "edited_arguments", None)
    asked = getattr(approval, "arguments", None)
    if not isinstance(edited, dict) or not isinstance(asked, dict):
        return []
    names = list(asked) + [k for k in edited if k not in asked]
    return [
        (str(k), _value_text(asked.get(k)), _value_text(edited.get(k)))
        for k in names
        if _pretty(asked.get(k)) != _pretty(edited.get(k))
    ]
