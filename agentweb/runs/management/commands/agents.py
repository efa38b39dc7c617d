"""``manage.py agents export [NAME ...]`` prints agent profiles as JSON (the shape of
``GET /api/agents``); ``manage.py agents import FILE`` creates or updates profiles from
such a file, JSON or YAML. An import is all or nothing: any invalid profile leaves every
profile as it was and names the fields."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from agentweb.runs import profiles
from agentweb.runs.models import AgentProfile

MAX_FILE_BYTES = 2_000_000


class Command(BaseCommand):
    help = "Export agent profiles as JSON, or import them from a JSON or YAML file."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        export = sub.add_parser("export", help="print profiles as {'agents': [...]}")
        export.add_argument("names", nargs="*", help="profile names (default: all)")
        imp = sub.add_parser("import", help="create or update profiles from FILE ('-': stdin)")
        imp.add_argument("file")

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["action"] == "export":
            self._export(list(opts["names"]))
        else:
            self._import(opts["file"])

    def _export(self, names: list[str]) -> None:
        found = AgentProfile.objects.order_by("name")
        if names:
            found = found.filter(name__in=names)
            missing = sorted(set(names) - set(found.values_list("name", flat=True)))
            if missing:
                raise CommandError(f"no agent profile named {', '.join(missing)}")
        data = {"agents": [profiles.profile_json(p) for p in found]}
        self.stdout.write(json.dumps(data, indent=2, ensure_ascii=False))

    def _import(self, path: str) -> None:
        items = read_profiles(path)
        created, updated = import_profiles(items)
        self.stdout.write(
            f"imported {len(items)} profile{'s' if len(items) != 1 else ''}: "
            f"{len(created)} created ({', '.join(created) or '-'}), "
            f"{len(updated)} updated ({', '.join(updated) or '-'})"
        )


def read_profiles(path: str) -> list[dict[str, Any]]:
    """The profiles of a JSON or YAML file: ``{"agents": [...]}``, a list, or one profile."""
    if path == "-":
        text = sys.stdin.read(MAX_FILE_BYTES + 1)
    else:
        file = Path(path)
        if not file.is_file():
            raise CommandError(f"{path}: no such file")
        if file.stat().st_size > MAX_FILE_BYTES:
            raise CommandError(f"{path}: larger than {MAX_FILE_BYTES:,} bytes")
        text = file.read_text(encoding="utf-8", errors="replace")
    if len(text) > MAX_FILE_BYTES:
        raise CommandError(f"{path}: larger than {MAX_FILE_BYTES:,} bytes")
    data: Any
    try:
        data = json.loads(text)
    except ValueError:
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise CommandError(f"{path}: neither JSON nor YAML: {exc}") from None
    if isinstance(data, dict) and "agents" in data:
        data = data["agents"]
    elif isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not all(isinstance(p, dict) for p in data):
        raise CommandError(f'{path}: expected {{"agents": [profile, ...]}}')
    names = [p.get("name") for p in data]
    dupes = sorted({str(n) for n in names if names.count(n) > 1})
    if dupes:
        raise CommandError(f"{path}: profiles named twice: {', '.join(dupes)}")
    return data


def import_profiles(items: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """Create or update every profile in one transaction. Delegates are set in a second
    pass, so profiles of one file may name each other."""
    created: list[str] = []
    updated: list[str] = []
    errors: list[str] = []
    with transaction.atomic():
        saved: list[tuple[AgentProfile, dict[str, Any]]] = []
        for item in items:
            name = str(item.get("name") or "").strip()
            existing = AgentProfile.objects.filter(name=name).first() if name else None
            first = {k: v for k, v in item.items() if k != "delegates"}
            try:
                profile = profiles.save_profile(first, existing)
            except profiles.ProfileInvalid as exc:
                errors += [f"{name or '(no name)'}: {f}: {m}" for f, m in exc.errors.items()]
                continue
            (updated if existing else created).append(profile.name)
            saved.append((profile, item))
        for profile, item in saved:
            if "delegates" in item:
                try:
                    profiles.save_profile({"delegates": item["delegates"]}, profile, partial=True)
                except profiles.ProfileInvalid as exc:
                    errors += [f"{profile.name}: {f}: {m}" for f, m in exc.errors.items()]
        if errors:
            transaction.set_rollback(True)
    if errors:
        raise CommandError("nothing imported:\n" + "\n".join(f"  {e}" for e in errors))
    return created, updated
