"""The run's workspace: one directory per run under the data directory.

Every path a tool or a download names is resolved with ``resolve``: relative only, no
``..``, and after following symbolic links still inside the workspace. Anything else is
refused with a message that names the path and why.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from agentweb.runtime.tools import ToolError

from . import config

MAX_READ_BYTES = 64 * 1024
MAX_WRITE_BYTES = 10 * 1024 * 1024
MAX_LISTED = 500
_RUN_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")


class PathRefused(ToolError):
    """A path outside the workspace (or otherwise unusable); the message says why."""


def workspace_path(run_id: str | None, *, create: bool = True) -> Path:
    """The workspace of ``run_id`` (``local`` without a run), created on first use.
    Each use touches the directory, which is what the retention clean-up goes by."""
    key = str(run_id) if run_id else "local"
    if not _RUN_KEY.fullmatch(key):
        raise ValueError(f"not a usable run id for a workspace: {key!r}")
    path = config.workspaces_dir() / key
    if create:
        path.mkdir(parents=True, exist_ok=True, mode=0o750)
        os.utime(path)
    return path


def resolve(workspace: Path, path: str) -> Path:
    """``path`` inside ``workspace`` as an absolute path; raises ``PathRefused``."""
    shown = repr(path)
    if "\x00" in path:
        raise PathRefused(f"refused: {shown} contains a NUL character")
    if path.startswith(("/", "\\", "~")) or re.match(r"^[A-Za-z]:", path):
        raise PathRefused(f"refused: {shown} is an absolute path; give a path inside the workspace")
    parts = [p for p in re.split(r"[/\\]", path) if p not in ("", ".")]
    if ".." in parts:
        raise PathRefused(f"refused: {shown} uses '..'; paths must stay inside the workspace")
    root = workspace.resolve()
    full = root.joinpath(*parts)
    real = full.resolve(strict=False)
    if real != root and root not in real.parents:
        raise PathRefused(
            f"refused: {shown} is or passes through a symbolic link that points outside "
            "the workspace"
        )
    return real


def relative(workspace: Path, path: Path) -> str:
    return path.relative_to(workspace.resolve()).as_posix() or "."


@dataclass(frozen=True, slots=True)
class Entry:
    path: str
    kind: str  # "file" | "dir" | "link"
    size: int
    modified: float


def entries(workspace: Path, path: str = ".", limit: int = MAX_LISTED) -> list[Entry]:
    """Files and folders below ``path`` (recursively, sorted, at most ``limit``).
    Symbolic links are listed as links and never followed."""
    start = resolve(workspace, path)
    if not start.exists():
        raise PathRefused(f"not found: {path!r} does not exist in the workspace")
    if not start.is_dir():
        st = start.lstat()
        return [Entry(relative(workspace, start), "file", st.st_size, st.st_mtime)]
    root = workspace.resolve()
    out: list[Entry] = []
    for dirpath, dirnames, filenames in os.walk(start, followlinks=False):
        dirnames.sort()
        here = Path(dirpath)
        for name in [*dirnames, *sorted(filenames)]:
            p = here / name
            st = p.lstat()
            kind = (
                "link"
                if stat.S_ISLNK(st.st_mode)
                else "dir"
                if stat.S_ISDIR(st.st_mode)
                else "file"
            )
            out.append(Entry(p.relative_to(root).as_posix(), kind, st.st_size, st.st_mtime))
            if len(out) >= limit:
                return sorted(out, key=lambda e: e.path)
    return sorted(out, key=lambda e: e.path)


def open_for_read(workspace: Path, path: str) -> tuple[Path, int]:
    """A regular file inside the workspace, opened without following a final link:
    (resolved path, file descriptor)."""
    full = resolve(workspace, path)
    try:
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise PathRefused(f"not found: {path!r} does not exist in the workspace") from None
    except OSError as exc:
        raise PathRefused(f"refused: {path!r} cannot be opened ({exc.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise PathRefused(f"refused: {path!r} is not a regular file")
    return full, fd


def read_bytes(workspace: Path, path: str, limit: int = MAX_READ_BYTES) -> tuple[bytes, int]:
    """The first ``limit`` bytes of a file and its full size."""
    _, fd = open_for_read(workspace, path)
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        return fh.read(limit), size


def write_text(workspace: Path, path: str, content: str) -> tuple[str, int]:
    data = content.encode("utf-8")
    if len(data) > MAX_WRITE_BYTES:
        raise PathRefused(
            f"refused: {len(data)} bytes is more than the limit of {MAX_WRITE_BYTES} bytes per file"
        )
    full = resolve(workspace, path)
    if full == workspace.resolve():
        raise PathRefused(f"refused: {path!r} names the workspace itself, not a file")
    full.parent.mkdir(parents=True, exist_ok=True)
    resolve(workspace, relative(workspace, full.parent))  # the folders made are inside too
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(full, flags, 0o640)
    except IsADirectoryError:
        raise PathRefused(f"refused: {path!r} is a folder") from None
    except OSError as exc:
        raise PathRefused(f"refused: {path!r} cannot be written ({exc.strerror})") from None
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return relative(workspace, full), len(data)


def cleanup(retention_days: int | None = None, now: float | None = None) -> list[str]:
    """Delete workspaces not used for ``retention_days``; returns the removed names."""
    days = config.retention_days() if retention_days is None else retention_days
    base = config.workspaces_dir()
    if days <= 0 or not base.is_dir():
        return []
    cutoff = (time.time() if now is None else now) - days * 86400
    removed = []
    for child in base.iterdir():
        try:
            st = child.lstat()
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_mtime < cutoff:
            shutil.rmtree(child, ignore_errors=True)
            removed.append(child.name)
    return removed
