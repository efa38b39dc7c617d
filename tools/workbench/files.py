"""Workspace tools: list, read and write files in the run's own workspace."""

from __future__ import annotations

from typing import Any

from agentweb.runtime.images import Image, ToolOutput, image_size
from agentweb.runtime.tools import ToolContext, tool

from . import workspace

_IMAGE_TYPES = {b"\x89PNG": "image/png", b"\xff\xd8\xff": "image/jpeg", b"GIF8": "image/gif"}


@tool(risk="low", timeout=20, expected_duration=0.1, read_only=True)
def list_files(ctx: ToolContext, path: str = ".") -> dict[str, Any]:
    """List the files in the run's workspace (recursively), with their sizes.

    Args:
        path: A folder inside the workspace, relative, e.g. "." or "reports".
    """
    ws = workspace.workspace_path(ctx.run_id)
    found = workspace.entries(ws, path)
    return {
        "path": path,
        "files": [{"path": e.path, "type": e.kind, "size": e.size} for e in found],
        "count": len(found),
        "limited": len(found) >= workspace.MAX_LISTED,
    }


@tool(risk="low", timeout=20, expected_duration=0.1, read_only=True)
def read_file(ctx: ToolContext, path: str) -> Any:
    """Read a file from the run's workspace: text (the first 64 KiB), or an image (PNG,
    JPEG, GIF) that you get to see.

    Args:
        path: The file, relative to the workspace, e.g. "data/orders.csv".
    """
    ws = workspace.workspace_path(ctx.run_id)
    head, size = workspace.read_bytes(ws, path)
    media = next((m for sig, m in _IMAGE_TYPES.items() if head.startswith(sig)), None)
    if media is not None:
        data, size = workspace.read_bytes(ws, path, limit=5 * 1024 * 1024)
        if size <= len(data):
            dims = image_size(data)
            info = {"path": path, "size": size, "image": media}
            if dims:
                info["width"], info["height"] = dims
            return ToolOutput(info, images=[Image(data, media)])
    if b"\x00" in head[:8192]:
        return {"path": path, "size": size, "binary": True, "content": None}
    text = head.decode("utf-8", "replace")
    out: dict[str, Any] = {"path": path, "size": size, "content": text}
    if size > len(head):
        out["truncated"] = f"showing the first {len(head)} of {size} bytes"
    return out


@tool(risk="medium", timeout=20, expected_duration=0.1, idempotent=True)
def write_file(ctx: ToolContext, path: str, content: str) -> dict[str, Any]:
    """Write a text file in the run's workspace (replacing it if it exists); folders are
    created as needed.

    Args:
        path: The file, relative to the workspace, e.g. "out/refund.txt".
        content: The full text of the file.
    """
    ws = workspace.workspace_path(ctx.run_id)
    written, size = workspace.write_text(ws, path, content)
    return {"path": written, "bytes": size}
