"""A profile's system prompt is a template: ``{{name}}`` placeholders filled per run
(``wiring.prompt_variables``). Which names exist and what is wrong with a template, in a
leaf module (the profile checks and the wiring both read it)."""

from __future__ import annotations

import re

#: The variables a run fills in (``wiring.prompt_variables`` gives each a value).
VARIABLES = ("user", "now", "ticket", "ticket_id", "customer", "customer_id", "tools")

_OPEN = "{{"
_CLOSE = "}}"
_NAME = re.compile(r"\s*([a-z_]+)\s*")


def _line(text: str, at: int) -> int:
    return text.count("\n", 0, at) + 1


def placeholders(template: str) -> list[tuple[int, str | None]]:
    """Each ``{{`` of ``template``: where it starts and what it holds up to its ``}}``
    (None: not closed)."""
    out: list[tuple[int, str | None]] = []
    at = template.find(_OPEN)
    while at != -1:
        end = template.find(_CLOSE, at + 2)
        inner = None if end == -1 else template[at + 2 : end]
        if inner is None or _OPEN in inner:  # "{{ticket ... {{user}}": the first is open
            out.append((at, None))
            if inner is None:
                break
            at = template.find(_OPEN, at + 2)
            continue
        out.append((at, inner))
        at = template.find(_OPEN, end + 2)
    return out


def name_of(inner: str) -> str | None:
    """The variable name a placeholder's text holds (``" ticket "``: ``ticket``)."""
    match = _NAME.fullmatch(inner)
    return match.group(1) if match else None


def template_problem(template: str, allowed: frozenset[str] = frozenset()) -> str | None:
    """What is wrong with ``template`` (each unclosed ``{{``, each name that is no
    variable), or None. ``allowed``: names accepted besides ``VARIABLES`` (those a stored
    prompt already has)."""
    known = set(VARIABLES) | allowed
    problems: list[str] = []
    unknown = False
    for at, inner in placeholders(template):
        line = _line(template, at)
        if inner is None:
            rest = template[at + 2 :]
            ends = (rest.find("\n"), rest.find("\r"), rest.find(_OPEN), 18)  # forms post CRLF
            cut = min(i for i in ends if i >= 0)
            problems.append(f"line {line}: {_OPEN + rest[:cut]!r} is not closed with }}}}")
            continue
        name = name_of(inner)
        if name is None or name not in known:
            unknown = True
            problems.append(f"line {line}: {{{{{inner.strip()}}}}} is not a variable")
    if not problems:
        return None
    said = "; ".join(problems[:5]) + ("; ..." if len(problems) > 5 else "")
    if unknown:
        said += f" (variables: {', '.join('{{' + v + '}}' for v in VARIABLES)})"
    return said


def names_in(template: str) -> frozenset[str]:
    """The variable names ``template`` uses (closed placeholders only)."""
    names = (name_of(inner) for _, inner in placeholders(template) if inner is not None)
    return frozenset(name for name in names if name)
