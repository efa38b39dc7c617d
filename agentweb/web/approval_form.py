"""Edit & approve as a form built from the tool's JSON schema, one field per argument.

Strings are textareas holding the text itself (new lines as new lines, no JSON quoting),
numbers are number inputs, enums selects, booleans checkboxes; objects, arrays and
anything else are JSON. ``fields_for`` builds the fields (from the asked arguments, or
from what was posted when it is shown again with errors), ``read`` turns a posted form
back into arguments and says what could not be read, per field. The arguments then go
through the one decide action (the tool's schema and its ``check=``), whose errors come
back per field too (``InvalidArguments.details["fields"]``).

Form field names are ``arg.<name>``: they never collide with the form's own fields.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from agentweb.middleware import MAX_INT, BadInput, strict_json
from agentweb.runs.event_text import pretty
from agentweb.runs.toolset import registry

PREFIX = "arg."
_MISSING = object()


@dataclass
class ArgField:
    name: str
    kind: str  # text | number | integer | select | checkbox | json
    help: str = ""
    required: bool = False
    nullable: bool = False
    value: str = ""  # what the input shows
    checked: bool = False  # checkbox
    options: list[tuple[str, str]] = field(default_factory=list)  # select: (value, label)
    error: str = ""
    extra: bool = False  # not an argument of the tool (the model sent it)
    dom_id: str = ""  # the input's id in the page

    @property
    def input_name(self) -> str:
        return PREFIX + self.name

    @property
    def rows(self) -> int:
        """A textarea tall enough for its text (within reason)."""
        lines = self.value.count("\n") + 1 + len(self.value) // 70
        return max(1 if self.kind == "text" else 3, min(lines, 16))


def schema_of(tool_name: str) -> dict[str, Any] | None:
    """The tool's argument schema, or None when it is not loaded here."""
    try:
        tool = registry().get(tool_name)
    except Exception:  # a broken tool module: the JSON box still works
        return None
    schema = getattr(tool, "schema", None)
    return schema if isinstance(schema, dict) else None


def _shape(prop: Mapping[str, Any]) -> tuple[str, bool, list[Any]]:
    """(kind, nullable, enum values) of one property's schema."""
    nullable = False
    branches = prop.get("anyOf") or prop.get("oneOf")
    if isinstance(branches, list):
        rest = [b for b in branches if not (isinstance(b, dict) and b.get("type") == "null")]
        nullable = len(rest) < len(branches)
        if len(rest) != 1 or not isinstance(rest[0], dict):
            return "json", nullable, []
        prop = rest[0]
    kind = prop.get("type")
    if isinstance(kind, list):  # {"type": ["string", "null"]}
        nullable = nullable or "null" in kind
        others = [k for k in kind if k != "null"]
        kind = others[0] if len(others) == 1 else None
    if "enum" in prop and isinstance(prop["enum"], list):
        return "select", nullable, list(prop["enum"])
    if "const" in prop:
        return "select", nullable, [prop["const"]]
    return (
        {"string": "text", "number": "number", "integer": "integer", "boolean": "checkbox"}.get(
            str(kind), "json"
        ),
        nullable,
        [],
    )


def _fits(kind: str, value: Any) -> bool:
    if value is None or value is _MISSING:
        return True
    if kind == "text":
        return isinstance(value, str)
    if kind in ("number", "integer"):
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "checkbox":
        return isinstance(value, bool)
    return True


def _number_text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _option(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _shown(kind: str, value: Any) -> str:
    if value is None or value is _MISSING:
        return ""
    if kind == "text":
        return str(value)
    if kind in ("number", "integer"):
        return _number_text(value)
    if kind == "select":
        return _option(value)
    return pretty(value)


def fields_for(
    tool_name: str,
    arguments: Any,
    *,
    posted: Mapping[str, Any] | None = None,
    errors: Mapping[str, str] | None = None,
    id_prefix: str = "arg",
) -> list[ArgField] | None:
    """One field per argument of the tool (then any the model sent that it does not have),
    showing ``arguments``, or what was ``posted`` when the form comes back with
    ``errors`` (by argument name); inputs' ids start with ``id_prefix``. None when the
    tool's schema is not known here."""
    schema = schema_of(tool_name)
    if schema is None:
        return None
    props = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    given = arguments if isinstance(arguments, dict) else {}
    errors = errors or {}
    out = []
    names = list(props) + [k for k in given if k not in props]
    if posted is not None:  # fields the model sent are kept when shown again
        names += [k for k in _posted_names(posted) if k not in names]
    for index, name in enumerate(names):
        prop = props.get(name)
        kind, nullable, enum = _shape(prop) if isinstance(prop, dict) else ("json", True, [])
        value = given.get(name, _MISSING)
        if not _fits(kind, value) or (kind == "select" and value not in (*enum, None, _MISSING)):
            kind, enum = "json", []  # shown as it came, so nothing is lost
        item = ArgField(
            name=str(name),
            kind=kind,
            help=str(prop.get("description") or "") if isinstance(prop, dict) else "",
            required=name in required,
            nullable=nullable,
            extra=prop is None,
            error=str(errors.get(name, "")),
            dom_id=f"{id_prefix}-{index}",
        )
        if kind == "select":
            item.options = ([("null", "(none)")] if nullable else []) + [
                (_option(v), str(v)) for v in enum
            ]
        if posted is not None:
            raw = posted.get(item.input_name)
            if kind == "checkbox":
                item.checked = raw is not None
            else:
                item.value = _newlines(str(raw or ""))
        elif kind == "checkbox":
            item.checked = value is True
        else:
            item.value = _shown(kind, value)
            if kind == "select" and value is _MISSING and not nullable and item.options:
                item.value = item.options[0][0]
        out.append(item)
    return out


def _posted_names(posted: Mapping[str, Any]) -> list[str]:
    return [k[len(PREFIX) :] for k in posted if str(k).startswith(PREFIX)]


def _newlines(text: str) -> str:
    """Browsers send a textarea's new lines as CR LF: the argument has LF."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def read(tool_name: str, posted: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The arguments a posted form gives, and what could not be read, per argument. An
    empty field is null when the argument may be null, left out when it is optional,
    and "" for a string that may not be null (a person may mean an empty text)."""
    fields = fields_for(tool_name, {}, posted=posted) or []
    arguments: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for item in fields:
        if item.kind == "checkbox":
            arguments[item.name] = item.checked
            continue
        text = item.value
        if item.kind == "text":
            arguments[item.name] = None if (not text and item.nullable) else text
            continue
        if not text.strip():
            if item.nullable and not item.extra:
                arguments[item.name] = None
            elif item.required:
                errors[item.name] = "required"
            continue  # optional: the tool's default applies
        try:
            arguments[item.name] = _parse(item, text.strip())
        except BadInput as exc:
            errors[item.name] = str(exc)
    return arguments, errors


def _parse(item: ArgField, text: str) -> Any:
    if item.kind in ("number", "integer"):
        try:
            number = Decimal(text)
        except InvalidOperation:
            raise BadInput(f"{text[:40]!r} is not a number") from None
        if not number.is_finite():
            raise BadInput("must be a finite number")
        whole = number == number.to_integral_value()
        if item.kind == "integer" and not whole:
            raise BadInput("must be a whole number")
        if abs(number) > MAX_INT:
            raise BadInput("is out of range")
        return int(number) if whole else float(number)
    if item.kind == "select":
        try:
            value = strict_json(text)
        except BadInput:
            raise BadInput("pick one of the choices") from None
        if text not in {v for v, _ in item.options}:
            raise BadInput("pick one of the choices")
        return value
    try:
        return strict_json(text)
    except BadInput as exc:
        raise BadInput(f"{exc} (this argument is JSON)") from None
