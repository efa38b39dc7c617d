"""The API keeps the promise of its OpenAPI document, as a tool nobody here wrote reads it.

schemathesis (requirements-dev.txt) reads /api/openapi.json of a live server (Daphne on
the test database, as an admin with an API token, the document as that admin gets it),
generates requests for every operation the document lists (whatever app added it), one
operation at a time, and runs all its checks: no 5xx, status codes, content types,
headers and bodies as documented, schema-valid requests accepted, schema-violating ones
refused, 405 with Allow for undeclared methods, authentication honoured. Any finding
fails the test.

A fixed seed and a few examples per operation keep it repeatable and short; the same
command by hand, with more examples, is in docs/integrate.md.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import start_web

SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"
CONFIG = Path(__file__).parent / "schemathesis.toml"
SEED = 31
EXAMPLES = 8  # per operation and phase; `-n 100` by hand finds the same (docs/integrate.md)
METHODS = ("get", "put", "post", "patch", "delete")


@pytest.fixture
def api(
    demo: dict[str, Any], stack_env: dict[str, str], tmp_path: Path
) -> Iterator[dict[str, Any]]:
    """A web process of its own (on a queue no worker reads: runs it starts stay queued),
    and an admin's token."""
    from agentweb.accounts.models import ApiToken

    env = {**stack_env, "AGENTWEB_QUEUE": f"contract-{os.getpid()}"}
    proc, url = start_web(env, tmp_path)
    try:
        yield {"url": url, "token": ApiToken.issue(demo["admin"]), "proc": proc}
    finally:
        proc.stop()


def document(api: dict[str, Any]) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {api['token']}"}
    response = httpx.get(f"{api['url']}/api/openapi.json", headers=headers, timeout=30)
    response.raise_for_status()
    doc: dict[str, Any] = response.json()
    return doc


def schemathesis(api: dict[str, Any], doc: dict[str, Any], path: Path, *extra: str) -> str:
    """Run schemathesis on ``doc`` against the live server; its output (raises on a
    finding, with the output)."""
    path.write_text(json.dumps(doc))
    argv = [
        str(SCHEMATHESIS),
        "--config-file",
        str(CONFIG),
        "run",
        str(path),
        "--url",
        api["url"],
        "--checks",
        "all",
        "--seed",
        str(SEED),
        "--max-examples",
        str(EXAMPLES),
        # lone surrogates are no Unicode (the document says so in words; JSON Schema's
        # patterns cannot name them); NUL characters are generated and must be refused
        "--generation-codec",
        "utf-8",
        "--generation-database",
        "none",
        "--workers",
        "1",
        "--request-timeout",
        "30",
        "--header",
        f"Authorization: Bearer {api['token']}",
        "--no-color",
        # Each operation on its own (examples, coverage, fuzzing); not the stateful phase,
        # whose sequences delete a seeded profile and then name it as the document (read
        # before) lists it: a document cannot know what is deleted after it was read.
        "--phases",
        "examples,coverage,fuzzing",
        *extra,
    ]
    done = subprocess.run(  # in tmp: schemathesis keeps a cache of crashes where it runs
        argv, capture_output=True, text=True, timeout=900, check=False, cwd=path.parent
    )
    out = done.stdout + done.stderr
    if done.returncode != 0:
        raise Finding(out)
    return out


class Finding(AssertionError):
    def __init__(self, output: str) -> None:
        super().__init__(output[-20000:])
        self.output = output


def operations(doc: dict[str, Any]) -> list[str]:
    return [
        f"{method.upper()} {path}"
        for path, item in doc["paths"].items()
        for method in item
        if method in METHODS
    ]


def test_the_api_keeps_the_promise_of_its_document(api: dict[str, Any], tmp_path: Path) -> None:
    doc = document(api)
    listed = operations(doc)
    # the operations this suite promises to cover, and whatever is added later
    for operation in [
        "GET /api/runs",
        "POST /api/runs",
        "GET /api/tickets",
        "POST /api/tickets",
        "GET /api/mcp-servers",
        "POST /api/mcp-servers",
        "GET /api/spend",
        "PATCH /api/agents/{name}",
    ]:
        assert operation in listed
    out = schemathesis(api, doc, tmp_path / "openapi.json")
    tested = re.search(r"Selected: (\d+)/(\d+)\s+Tested: (\d+)", out)
    assert tested, out[-3000:]
    assert tested.groups() == (str(len(listed)),) * 3, out[-3000:]


def test_it_catches_a_document_that_promises_what_the_server_refuses(
    api: dict[str, Any], tmp_path: Path
) -> None:
    """The same run fails when the document is wrong: here it says GET /api/runs takes a
    limit up to 500, which the server refuses above 200."""
    doc = copy.deepcopy(document(api))
    for param in doc["paths"]["/api/runs"]["get"]["parameters"]:
        if param["name"] == "limit":
            assert param["schema"]["maximum"] == 200
            param["schema"]["maximum"] = 500
    with pytest.raises(Finding) as found:
        schemathesis(
            api,
            doc,
            tmp_path / "wrong.json",
            "--include-path",
            "/api/runs",
            "--include-method",
            "GET",
        )
    assert "Schema-valid request rejected" in found.value.output
    assert "limit must be at most 200" in found.value.output
