"""One log line per outage episode, not one per attempt.

While Redis is away the same expected failure repeats: every metrics flush of every
process, every late ack of a run in flight, every scheduled task beat tries to send. Each
says what happened once, when the episode starts; the repeats are counted, not logged. An
episode of a kind ends when its caller sees the service back (``over``) or, for callers
that cannot see that, after ``QUIET_SECONDS`` without a failure of that kind.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

QUIET_SECONDS = 60.0


class Episodes:
    def __init__(
        self, quiet: float = QUIET_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.quiet, self.clock = quiet, clock
        self.last: dict[str, float] = {}  # kind -> when its latest failure was seen
        self.missed: dict[str, int] = {}  # kind -> repeats not logged in this episode
        self.lock = threading.Lock()

    def first(self, kind: str) -> bool:
        """A failure of ``kind``: whether it starts an episode (then log it)."""
        now = self.clock()
        with self.lock:
            last = self.last.get(kind)
            self.last[kind] = now
            if last is None or now - last > self.quiet:
                self.missed[kind] = 0
                return True
            self.missed[kind] = self.missed.get(kind, 0) + 1
            return False

    def over(self, kind: str) -> int | None:
        """The service is back for ``kind``: the episode's repeats not logged, or None
        when there was no episode."""
        with self.lock:
            if self.last.pop(kind, None) is None:
                return None
            return self.missed.pop(kind, 0)


#: This process's episodes (the broker's log filter, the metrics flush).
EPISODES = Episodes()
