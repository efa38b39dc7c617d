"""Test-only fault injection: the worker process dies at a named point of a step.

``AGENTWEB_TEST_CRASH_AT=<point>[:<tool>]`` makes the process ``os._exit`` when it
reaches ``<point>`` (for a call of ``<tool>`` when one is named), the way ``kill -9``
would: no cleanup, no rollback handler, open transactions lost. The end-to-end tests use
it to show that every intended side effect happens once whatever instant a worker dies.
Unset (the default) it costs one attribute read.

Before any step, ``message_received``: the worker took the run's message off the queue
and has not claimed the run (the message is gone from Redis: only beat's sweep brings
the run back). It names no tool.

Points, in the order a step passes them:

- ``reply_received``: the model's reply is in memory, nothing of it is stored yet;
- ``reply_stored``: the reply and its planned calls are committed, no tool has run
  (quick reads excepted: they ran in the reply's step and were committed with it);
- ``tool_begun``: the execution record of a call with side effects is committed, the
  tool has not been called;
- ``tool_returned``: the tool returned, its result is not recorded yet;
- ``tool_recorded``: the result is committed in the journal, the step is not;
- ``step_committing``: inside the step's transaction, just before its commit.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable

from django.conf import settings

log = logging.getLogger(__name__)

POINTS = (
    "reply_received",
    "reply_stored",
    "tool_begun",
    "tool_returned",
    "tool_recorded",
    "step_committing",
)
EXIT_CODE = 86


def crash_point(point: str, tools: Iterable[str] = ()) -> None:
    spec = settings.AGENTWEB_TEST_CRASH_AT
    if not spec:
        return
    wanted, _, only_tool = spec.partition(":")
    if wanted != point or (only_tool and only_tool not in set(tools)):
        return
    log.warning("AGENTWEB_TEST_CRASH_AT=%s: exiting the worker now", spec)
    sys.stderr.flush()
    os._exit(EXIT_CODE)
