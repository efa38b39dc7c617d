"""A worker that starts re-enqueues runs whose lease expired, without waiting for beat:
the replacement of a killed worker picks its runs up at once."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from agentweb.runs.models import AgentProfile, Run
from tests.conftest import start_worker, wait_for

pytestmark = pytest.mark.e2e


def test_a_starting_worker_takes_over_a_run_whose_lease_expired(
    demo: dict[str, Any], stack_env: dict[str, str], tmp_path: Any
) -> None:
    env = {
        **stack_env,
        "AGENTWEB_MODEL": "demo",
        "AGENTWEB_QUEUE": f"sweep-{os.getpid()}",  # no beat and no other worker serve it
    }
    run = Run.objects.create(
        task="Where is my parcel for order A1002? It is late.",
        agent=AgentProfile.objects.get(name="ticket-assistant"),
        created_by=demo["operator"],
        status=Run.Status.RUNNING,
        lease_owner="a-worker-that-was-killed",
        lease_expires_at=timezone.now() - timedelta(seconds=5),
        started_at=timezone.now() - timedelta(seconds=30),
    )
    worker = start_worker(env, tmp_path, "sweeper")
    try:
        wait_for(lambda: Run.objects.get(pk=run.pk).lease_owner != "a-worker-that-was-killed")
        wait_for(lambda: Run.objects.get(pk=run.pk).status != Run.Status.RUNNING, timeout=60)
    finally:
        worker.stop()
    run.refresh_from_db()
    assert run.status in (Run.Status.WAITING_APPROVAL, Run.Status.SUCCEEDED), run.status
    assert run.attempts == 1
    assert run.events.filter(type="model_called").exists()
