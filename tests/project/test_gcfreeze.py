"""The web and the worker freeze what they imported once started (agentweb/gcfreeze.py),
so the garbage collector's full passes do not walk it. Each in a process of its own, as
they run."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT


def frozen_after(code: str) -> int:
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="agentweb.settings")
    done = subprocess.run(
        [sys.executable, "-c", code + "\nimport gc\nprint(gc.get_freeze_count())"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return int(done.stdout.strip().splitlines()[-1])


def test_nothing_is_frozen_by_importing_django_alone() -> None:
    assert frozen_after("import django; django.setup()") == 0


def test_the_asgi_application_freezes_what_it_imported() -> None:
    assert frozen_after("import agentweb.asgi") > 100_000


def test_a_worker_freezes_what_it_imported_once_ready() -> None:
    code = (
        "import django; django.setup()\n"
        "from agentweb.celery import app\n"
        "from celery import signals\n"
        "import gc, sys; assert gc.get_freeze_count() == 0\n"
        # the tasks' own start-up receivers (sweeps) are not loaded: only celery.py's run
        "assert 'agentweb.runs.tasks' not in sys.modules\n"
        "signals.worker_ready.send(sender=None)"
    )
    assert frozen_after(code) > 100_000
