"""No role, no data; login throttling; the Content-Security-Policy header; the health check
(DESIGN §5, issue 12 point 7)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from agentweb.accounts.models import ApiToken
from agentweb.accounts.roles import ensure_roles
from tests.web import factories as f

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def shop() -> dict[str, Any]:
    from agentweb.shop.models import Customer
    from tests.tickets.factories import make_ticket

    now = timezone.now()
    customer = Customer.objects.create(
        code="C-9001", name="Ada Secretcustomer", email="a@x.y", created_at=now
    )
    ticket = make_ticket("Confidential parcel lost", "Body of the ticket", customer=customer)
    operator = User.objects.create_user("operator", password="pw-123456789")
    operator.groups.add(ensure_roles()["operator"])
    run = f.make_run(operator, task="Refund for Ada Secretcustomer")
    f.emit(run, {"type": "run_started", "data": {}}, f.model_called())
    nobody = User.objects.create_user("nobody", password="pw-123456789")
    return {"ticket": ticket, "run": run, "nobody": nobody, "operator": operator}


def test_a_user_without_a_role_sees_no_data(shop: dict[str, Any]) -> None:
    client = Client()
    client.force_login(shop["nobody"])
    run = shop["run"]
    pages = [
        "/tickets/",
        "/runs/",
        f"/runs/{run.pk}/",
        f"/runs/{run.pk}/replay/",
        f"/runs/{run.pk}/export.json",
        f"/runs/compare/?a={run.pk}&b={run.pk}",
        "/runs/import/",
        "/approvals/",
        "/agents/",
    ]
    for path in pages:
        response = client.get(path)
        body = response.content.decode()
        assert response.status_code == 403, path
        assert "no role" in body, path
        for secret in ("Secretcustomer", "Confidential parcel", "C-9001"):
            assert secret not in body, (path, secret)
    token = ApiToken.issue(shop["nobody"])
    api = Client()
    for path in ["/api/tickets", "/api/runs", f"/api/runs/{run.pk}", "/api/approvals"]:
        response = api.get(path, HTTP_AUTHORIZATION=f"Bearer {token}")
        assert response.status_code == 403, path
        assert response.json()["error"]["code"] == "no_role"
        assert "Secretcustomer" not in response.content.decode()
    # Logging out (and in) still works.
    assert client.post("/accounts/logout/").status_code in (200, 302)


def test_a_role_still_sees_its_data(shop: dict[str, Any]) -> None:
    client = Client()
    client.force_login(shop["operator"])
    assert "Confidential parcel" in client.get("/tickets/").content.decode()
    token = ApiToken.issue(shop["operator"])
    tickets = Client().get("/api/tickets", HTTP_AUTHORIZATION=f"Bearer {token}").json()
    assert any(t["subject"] == "Confidential parcel lost" for t in tickets["tickets"])


def test_failed_logins_are_throttled(shop: dict[str, Any]) -> None:
    from django.conf import settings

    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        response = client.post("/accounts/login/", {"username": "operator", "password": "bad"})
        assert response.status_code == 200  # the form again, with its error
    locked = client.post("/accounts/login/", {"username": "operator", "password": "bad"})
    assert locked.status_code == 429
    assert "Too many failed logins" in locked.content.decode()
    # The right password does not help while locked ...
    right = client.post("/accounts/login/", {"username": "operator", "password": "pw-123456789"})
    assert right.status_code == 429
    # ... and other users (and the same user elsewhere) are not locked out.
    other = Client(REMOTE_ADDR="10.0.0.7")
    ok = other.post("/accounts/login/", {"username": "operator", "password": "pw-123456789"})
    assert ok.status_code == 302


def test_pages_carry_a_content_security_policy(shop: dict[str, Any]) -> None:
    client = Client()
    client.force_login(shop["operator"])
    policy = client.get("/tickets/")["Content-Security-Policy"]
    directives = dict(
        (d.split()[0], d.split()[1:]) for d in (p.strip() for p in policy.split(";")) if d
    )
    assert directives["script-src"] == ["'self'"]  # no inline script, no eval
    assert directives["default-src"] == ["'self'"]
    assert directives["frame-ancestors"] == ["'none'"]
    assert "'unsafe-inline'" not in directives["style-src"]
    # Templates carry no inline script or handler the policy would block.
    for template in (ROOT / "templates").rglob("*.html"):
        text = template.read_text()
        assert not re.search(r"<script(?![^>]*\b(src|type=\"application/json\")=)", text), template
        assert not re.search(r"\son[a-z]+=\"", text), template
        assert "javascript:" not in text, template


def test_healthz_answers_over_http_with_the_ssl_redirect_on(settings: Any) -> None:
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
    settings.ALLOWED_HOSTS = ["agents.example.com"]
    client = Client()
    # The container asks http://127.0.0.1:PORT/healthz: not a 301, not a 400 for the host.
    response = client.get("/healthz", HTTP_HOST="127.0.0.1:8000")
    assert response.status_code == 200 and response.json()["ok"] is True
    # Pages still redirect to HTTPS.
    assert client.get("/tickets/", HTTP_HOST="agents.example.com").status_code == 301


def test_healthz_fails_when_the_database_is_down(monkeypatch: pytest.MonkeyPatch) -> None:
    from django.db import OperationalError, connection

    def down() -> Any:
        raise OperationalError("connection refused")

    monkeypatch.setattr(connection, "cursor", down)
    response = Client().get("/healthz")
    assert response.status_code == 503
    assert json.loads(response.content)["ok"] is False


def test_the_container_check_fails_on_a_redirect() -> None:
    """The Dockerfile's check must not pass on a 301 (curl -f passes 3xx)."""
    line = next(
        line for line in (ROOT / "Dockerfile").read_text().splitlines() if "CMD curl" in line
    )
    assert "--max-redirs 0" in line and " -L " in line
    curl = subprocess.run(["which", "curl"], capture_output=True, text=True).stdout.strip()
    if not curl:
        pytest.skip("curl not installed")
    import http.server
    import threading

    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(301)
            self.send_header("Location", "https://127.0.0.1/healthz")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/healthz"
        args = [curl, "-fsS", "--max-redirs", "0", "-L", "-o", "/dev/null", url]
        assert subprocess.run(args, capture_output=True).returncode != 0
    finally:
        server.shutdown()


def test_queued_runs_whose_messages_a_restarted_redis_lost_are_due_at_once(
    shop: dict[str, Any], monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    """An empty broker queue with runs still queued: their messages are gone (Redis came
    back empty), so beat's sweep sends them now instead of after the queue grace."""
    from datetime import timedelta

    from agentweb import celery as celery_app
    from agentweb.runs import queue, tasks
    from agentweb.runs.models import Run

    sent: list[int] = []
    monkeypatch.setattr(queue, "send", lambda task, run_id, **_: sent.append(run_id))
    later = timezone.now() + timedelta(seconds=60)
    old = f.make_run(shop["operator"], status="queued")
    new = f.make_run(shop["operator"], status="queued")
    Run.objects.filter(pk=old.pk).update(
        created_at=timezone.now() - timedelta(seconds=30), lease_expires_at=later
    )
    Run.objects.filter(pk=new.pk).update(lease_expires_at=later)
    monkeypatch.setattr(celery_app, "broker_queue_length", lambda: 5)  # messages waiting
    with django_capture_on_commit_callbacks(execute=True):
        tasks.requeue_stale_runs()
    assert sent == []
    monkeypatch.setattr(celery_app, "broker_queue_length", lambda: 0)  # the queue is empty
    with django_capture_on_commit_callbacks(execute=True):
        tasks.requeue_stale_runs()
    assert sent == [old.pk]  # a run queued a moment ago may still be on its way
