"""Workspace tools: confined to the run's folder; `..`, absolute paths and links out refused."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from agentweb.runtime.execution import Invocation, ToolResult, run_tools
from agentweb.runtime.tools import Tool, ToolContext
from tools.workbench import config, workspace
from tools.workbench.files import list_files, read_file, write_file

from .conftest import PNG_1x1


def call(t: Tool, ctx: ToolContext, **args: object) -> ToolResult:
    return run_tools([Invocation(t, t.parse(args), ctx, 10)])[0]


def test_it_writes_lists_and_reads_inside_the_run_workspace(ctx: ToolContext, data_dir: Path):
    res = call(write_file, ctx, path="out/refund.txt", content="12.50 EUR\n")
    assert res.ok, res.error
    assert res.result == {"path": "out/refund.txt", "bytes": 10}
    assert (data_dir / "workspaces" / "77" / "out" / "refund.txt").read_text() == "12.50 EUR\n"
    listed = call(list_files, ctx)
    assert [f["path"] for f in listed.result["files"]] == ["out", "out/refund.txt"]
    got = call(read_file, ctx, path="./out//refund.txt")
    assert got.result["content"] == "12.50 EUR\n"


def test_runs_do_not_see_each_others_files(ctx: ToolContext) -> None:
    call(write_file, ctx, path="mine.txt", content="x")
    other = ToolContext(call_id="c2", run_id="78")
    assert call(list_files, other).result["files"] == []
    res = call(read_file, other, path="mine.txt")
    assert not res.ok and "does not exist" in (res.error or "")


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("../78/secret.txt", "uses '..'"),
        ("a/../../x", "uses '..'"),
        ("/etc/passwd", "is an absolute path"),
        ("\\\\server\\share", "is an absolute path"),
        ("~/notes", "is an absolute path"),
        ("C:/Windows", "is an absolute path"),
        ("a\x00b", "NUL"),
    ],
)
def test_paths_out_are_refused_naming_the_path(ctx: ToolContext, path: str, why: str) -> None:
    for t, args in (
        (read_file, {"path": path}),
        (write_file, {"path": path, "content": "x"}),
        (list_files, {"path": path}),
    ):
        res = call(t, ctx, **args)
        assert not res.ok
        assert res.error is not None and res.error.startswith("refused: ")
        assert repr(path) in res.error and why in res.error


def test_links_out_are_refused_but_links_inside_work(ctx: ToolContext, tmp_path: Path) -> None:
    ws = workspace.workspace_path(ctx.run_id)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("host secret")
    os.symlink(outside / "secret.txt", ws / "file-link")
    os.symlink(outside, ws / "dir-link")
    os.symlink("/etc/passwd", ws / "passwd")
    (ws / "real.txt").write_text("inside")
    os.symlink("real.txt", ws / "inner-link")
    for path in ("file-link", "dir-link/secret.txt", "passwd"):
        res = call(read_file, ctx, path=path)
        assert not res.ok and "symbolic link that points outside" in (res.error or ""), path
        assert "host secret" not in str(res.result)
    res = call(write_file, ctx, path="dir-link/new.txt", content="x")
    assert not res.ok and "symbolic link" in (res.error or "")
    assert not (outside / "new.txt").exists()
    res = call(list_files, ctx, path="dir-link")
    assert not res.ok
    assert call(read_file, ctx, path="inner-link").result["content"] == "inside"
    listed = {f["path"]: f["type"] for f in call(list_files, ctx).result["files"]}
    assert listed["dir-link"] == "link" and "dir-link/secret.txt" not in listed


def test_reads_are_bounded_and_images_come_back_as_images(ctx: ToolContext) -> None:
    ws = workspace.workspace_path(ctx.run_id)
    (ws / "big.txt").write_text("y" * 200_000)
    res = call(read_file, ctx, path="big.txt")
    assert len(res.result["content"]) == workspace.MAX_READ_BYTES
    assert res.result["truncated"] == "showing the first 65536 of 200000 bytes"
    (ws / "dot.png").write_bytes(PNG_1x1)
    res = call(read_file, ctx, path="dot.png")
    assert res.ok and res.result["image"] == "image/png"
    assert [i.data for i in res.images] == [PNG_1x1]


def test_a_huge_write_is_refused(ctx: ToolContext) -> None:
    res = call(write_file, ctx, path="huge.txt", content="z" * (workspace.MAX_WRITE_BYTES + 1))
    assert not res.ok and "limit" in (res.error or "")
    assert not (workspace.workspace_path(ctx.run_id) / "huge.txt").exists()


def test_retention_removes_only_old_workspaces(ctx: ToolContext) -> None:
    old = workspace.workspace_path("old-run")
    (old / "f.txt").write_text("x")
    fresh = workspace.workspace_path("fresh-run")
    past = time.time() - 31 * 86400
    os.utime(old, (past, past))
    removed = workspace.cleanup(retention_days=30)
    assert removed == ["old-run"]
    assert not old.exists() and fresh.exists()
    assert config.workspaces_dir() == old.parent
