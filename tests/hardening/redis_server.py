"""A throw-away redis-server on a free port that a test can kill -9 and start again."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.conftest import free_port


class RedisServer:
    def __init__(self, tmp: Path, port: int | None = None, unix: bool = False) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed")
        self.binary = binary
        self.tmp = tmp
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.socket = str(tmp / "redis.sock") if unix else None

    @property
    def url(self) -> str:
        if self.socket:
            return f"unix://{self.socket}?db=0"
        return f"redis://127.0.0.1:{self.port}/0"

    def _ping(self) -> bool:
        family = socket.AF_UNIX if self.socket else socket.AF_INET
        address: Any = self.socket if self.socket else ("127.0.0.1", self.port)
        with contextlib.suppress(OSError), socket.socket(family) as s:
            s.settimeout(0.2)
            s.connect(address)
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
        return False

    def start(self) -> RedisServer:
        # Empty on every start: no RDB, no AOF (a restart loses everything, as after a crash
        # of a Redis without persistence).
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--port",
                "0" if self.socket else str(self.port),
                *(["--unixsocket", self.socket] if self.socket else []),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.tmp),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self._ping():
                return self
            time.sleep(0.05)
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
