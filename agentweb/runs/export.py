"""A run as a file and back: the export document (``agentweb.run-export/1``, described on
the import page) and the checks an uploaded file passes before its replay is shown.

Nothing read from a file is stored or executed.
"""

from __future__ import annotations

import dataclasses
import functools
from datetime import datetime
from typing import IO, Any, Union, get_args, get_type_hints

from django.utils import timezone
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from agentweb.middleware import BadInput, strict_json
from agentweb.runs.models import Approval, Run, RunEvent
from agentweb.runtime import events as ev

EXPORT_SCHEMA = "agentweb.run-export/1"
MAX_IMPORT_BYTES = 10_000_000
MAX_IMPORT_EVENTS = 10_000


def export_document(run: Run) -> dict[str, Any]:
    """The export schema (``agentweb.run-export/1``), documented on the import page;
    ``children`` holds the run's subtasks, exported the same way."""
    return {
        "schema": EXPORT_SCHEMA,
        "exported_at": timezone.now().isoformat(),
        **_export_one(run),
        "children": export_children(run, _export_one),
    }


def _export_one(run: Run) -> dict[str, Any]:
    return {
        "run": run.as_json(),
        "events": [e.as_json() for e in RunEvent.objects.filter(run=run).order_by("seq")],
        "approvals": [
            a.as_json() for a in Approval.objects.filter(run=run).select_related("decided_by")
        ],
    }


MAX_IMPORT_CHILDREN = 200


def export_children(run: Run, export_one: Any) -> list[dict[str, Any]]:
    """``export_one(child)`` (run, events, approvals) for each child, with its own
    children nested the same way."""
    out = []
    for child in (
        Run.objects.filter(parent=run).select_related("agent", "created_by").order_by("pk")
    ):
        document = export_one(child)
        document["children"] = export_children(child, export_one)
        out.append(document)
    return out


def imported_children(doc: dict[str, Any], limit_events: int) -> list[dict[str, Any]]:
    """The subtasks of an export file, flattened depth first with their level, for the
    imported replay page. Raises ``ValueError`` (for people) when the tree is malformed or
    has more events than ``limit_events`` together with the top run's."""
    budget = [limit_events - len(doc.get("events") or ())]
    out: list[dict[str, Any]] = []

    def walk(children: Any, level: int) -> None:
        if children is None:
            return
        if not isinstance(children, list) or level > 3:
            raise ValueError('"children" must be a list of exported runs, at most 3 deep')
        for child in children:
            if not isinstance(child, dict) or not isinstance(child.get("run"), dict):
                raise ValueError('each child needs a "run" object')
            events = child.get("events")
            if not isinstance(events, list):
                raise ValueError('each child needs an "events" list')
            budget[0] -= len(events)
            if budget[0] < 0:
                raise ValueError(
                    f"the file has more than {limit_events:,} events with its subtasks"
                )
            if len(out) >= MAX_IMPORT_CHILDREN:
                raise ValueError(f"the file has more than {MAX_IMPORT_CHILDREN} subtasks")
            run = child["run"]
            out.append(
                {
                    "level": level,
                    "id": run.get("id"),
                    "agent": str(run.get("agent", ""))[:100],
                    "status": str(run.get("status", ""))[:40],
                    "task": str(run.get("task", ""))[:2000],
                    "final_answer": str(run.get("final_answer") or run.get("failure_reason") or "")[
                        :4000
                    ],
                    "events": len(events),
                }
            )
            walk(child.get("children"), level + 1)

    walk(doc.get("children"), 1)
    return out


class ImportedEvent:
    """Duck-typed RunEvent for a file's events (never saved)."""

    def __init__(self, raw: dict[str, Any]) -> None:
        seq = raw["seq"]
        if isinstance(seq, bool) or not isinstance(seq, int) or not 0 < seq < 2**31:
            raise ValueError("seq")
        self.seq = seq
        self.type = str(raw["type"])[:100]
        data = raw.get("data")
        self.data: dict[str, Any] = data if isinstance(data, dict) else {}
        self.at = _parse_at(raw.get("at"))


def _parse_at(value: Any) -> datetime | None:
    """An aware time between 1970 and 2999, else None (unknown): timings subtract them."""
    if not isinstance(value, str) or len(value) > 40:
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        return None
    if at.tzinfo is None or not 1970 <= at.year <= 2999:
        return None
    return at


class ToolCallItem(BaseModel):
    """An item of ``model_called``'s ``tool_calls`` as the runtime writes it
    (agentweb/runtime/loop.py); its event class types the items loosely."""

    model_config = ConfigDict(strict=True, extra="allow")

    name: str
    id: str | None = None
    arguments: Any = None  # parsed JSON, or the text the model sent
    cut_off: bool = False


#: Where the pages read more of an event's data than its class in the runtime says.
_NARROWER: dict[tuple[str, str], Any] = {(ev.MODEL_CALLED, "tool_calls"): list[ToolCallItem]}


@functools.cache
def _field_types(kind: str) -> dict[str, Any]:
    """The stored keys of event type ``kind`` and their types (the runtime's classes)."""
    cls = ev.CLASSES.get(kind)
    if cls is None:
        return {}
    hints = get_type_hints(cls)
    out = {}
    for item in dataclasses.fields(cls):
        annotation = hints[item.name]
        args = get_args(annotation)
        if ev.Unset in args:  # a key that is there holds a value
            annotation = Union[tuple(a for a in args if a is not ev.Unset)]  # noqa: UP007
        out[item.name] = _NARROWER.get((kind, item.name), annotation)
    out.pop("type", None)
    return out


@functools.cache
def _adapter(annotation: Any) -> TypeAdapter[Any]:
    return TypeAdapter(annotation)


def event_misfit(kind: str, data: dict[str, Any]) -> str | None:
    """Where an event's ``data`` does not have the types of its type's keys in the
    runtime (``agentweb.runtime.events``), or None. The keys it has are checked (an
    export of an older version may lack some); other keys, and unknown types, are shown
    as raw data."""
    types = _field_types(kind)
    for key, value in data.items():
        if key not in types:
            continue
        try:
            _adapter(types[key]).validate_python(value, strict=True)
        except ValidationError as exc:
            first = exc.errors()[0]
            at = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"])
            return f"{key}{at}: {first['msg'].lower()}"
    return None


def parse_export(raw: bytes) -> tuple[dict[str, Any], list[ImportedEvent]]:
    """Validate an export file; raises ValueError with a message for people."""
    try:
        doc = strict_json(raw)
    except BadInput as exc:
        raise ValueError(f"not a file we can show: {exc}") from None
    if not isinstance(doc, dict) or doc.get("schema") != EXPORT_SCHEMA:
        raise ValueError(f'not an agentweb export (expected "schema": "{EXPORT_SCHEMA}")')
    run = doc.get("run")
    events = doc.get("events")
    if not isinstance(run, dict) or not isinstance(events, list):
        raise ValueError('an export needs a "run" object and an "events" list')
    if len(events) > MAX_IMPORT_EVENTS:
        raise ValueError(
            f"the file has {len(events):,} events; at most {MAX_IMPORT_EVENTS:,} can be imported"
        )
    run = {**run, "subtasks": imported_children(doc, MAX_IMPORT_EVENTS)}
    parsed = []
    for i, item in enumerate(events):
        if not isinstance(item, dict) or "seq" not in item or "type" not in item:
            raise ValueError(f"event {i} lacks seq or type")
        try:
            imported = ImportedEvent(item)
        except (TypeError, ValueError):
            raise ValueError(f"event {i} has a seq that is not a number") from None
        problem = event_misfit(imported.type, imported.data)
        if problem:
            raise ValueError(f"event {i} ({imported.type[:40]}): data.{problem}")
        parsed.append(imported)
    parsed.sort(key=lambda e: e.seq)
    seqs = [e.seq for e in parsed]
    if len(set(seqs)) != len(seqs):
        raise ValueError("events repeat a seq")
    return run, parsed


def read_export(upload: IO[bytes]) -> tuple[dict[str, Any], list[ImportedEvent]]:
    """Read and check an uploaded export (at most ``MAX_IMPORT_BYTES``); raises
    ValueError with a message for people."""
    size = getattr(upload, "size", None)
    if size and size > MAX_IMPORT_BYTES:
        raise ValueError(f"the file is larger than {MAX_IMPORT_BYTES // 1_000_000} MB")
    raw = upload.read(MAX_IMPORT_BYTES + 1)
    if len(raw) > MAX_IMPORT_BYTES:
        raise ValueError(f"the file is larger than {MAX_IMPORT_BYTES // 1_000_000} MB")
    return parse_export(raw)
