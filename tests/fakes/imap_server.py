"""A real IMAP server for tests: Debian's dovecot (``dovecot-imapd``) on a loopback port
with a private configuration, its own user and password and a maildir in a temporary
folder; nothing of the machine's dovecot is used.

    server = ImapServer(tls="off")        # or "starttls" / "implicit" with ca=make_ca(...)
    server.start()
    server.url                            # imap://ann:...@127.0.0.1:PORT/INBOX?tls=off
    server.append(raw_bytes)              # IMAP APPEND
    server.drop_into_maildir(raw_bytes)   # written straight into new/ (works while down)
    server.stop(); server.start()         # a mailbox down for a while, same port
    server.new_uidvalidity()              # the folder's UIDs start over (stopped)
    server.close()

The master runs as the current user. Run as root, dovecot will not let its login process
or a mail user be root: then its own system users (``dovenull``, ``dovecot``) take those
parts, and the maildir belongs to ``dovecot``.
"""

from __future__ import annotations

import contextlib
import grp
import imaplib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Literal
from urllib.parse import quote

from tests.fakes.tls import TestCA

DOVECOT = shutil.which("dovecot") or "/usr/sbin/dovecot"


def available() -> bool:
    return Path(DOVECOT).exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ImapServer:
    def __init__(
        self,
        *,
        tls: Literal["off", "starttls", "implicit"] = "off",
        ca: TestCA | None = None,
        user: str = "ann",
        password: str | None = None,
    ) -> None:
        if tls != "off" and ca is None:
            raise ValueError("a TLS server needs the test CA's certificate (ca=make_ca(...))")
        self.tls, self.ca = tls, ca
        self.user = user
        self.password = password or "imap-" + uuid.uuid4().hex[:12]
        self.dir = Path(tempfile.mkdtemp(prefix="aw-dovecot-"))
        self.dir.chmod(0o755)  # dovecot's own users (when run as root) pass through it
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        if os.geteuid() == 0:
            mail = pwd.getpwnam("dovecot")
            self.mail_uid, self.mail_gid = mail.pw_uid, mail.pw_gid
            self.internal, self.login_user = "dovecot", "dovenull"
            self.internal_group = grp.getgrgid(mail.pw_gid).gr_name
        else:
            me = pwd.getpwuid(os.getuid())
            self.mail_uid, self.mail_gid = me.pw_uid, me.pw_gid
            self.internal = self.login_user = me.pw_name
            self.internal_group = grp.getgrgid(me.pw_gid).gr_name
        for sub in ("run", "state", "mail", "home"):
            (self.dir / sub).mkdir()
        for sub in ("mail", "home"):
            os.chown(self.dir / sub, self.mail_uid, self.mail_gid)
        (self.dir / "users").write_text(f"{self.user}:{{PLAIN}}{self.password}\n")
        (self.dir / "dovecot.conf").write_text(self._config())

    # --- the server ---------------------------------------------------------------------------

    def _config(self) -> str:
        d = self.dir
        ssl = {"off": "no", "starttls": "yes", "implicit": "yes"}[self.tls]
        lines = [
            f"base_dir = {d}/run",
            f"state_dir = {d}/state",
            f"log_path = {d}/dovecot.log",
            "protocols = imap",
            "listen = 127.0.0.1",
            f"ssl = {ssl}",
            "disable_plaintext_auth = no",
            "auth_mechanisms = plain login",
            "auth_failure_delay = 0",
            f"default_internal_user = {self.internal}",
            f"default_internal_group = {self.internal_group}",
            f"default_login_user = {self.login_user}",
            "first_valid_uid = 1",
            "first_valid_gid = 1",
            f"mail_location = maildir:{d}/mail/%u",
            "passdb {",
            "  driver = passwd-file",
            f"  args = scheme=PLAIN username_format=%u {d}/users",
            "}",
            "userdb {",
            "  driver = static",
            f"  args = uid={self.mail_uid} gid={self.mail_gid} home={d}/home/%u",
            "}",
            "service imap-login {",
            "  inet_listener imap {",
            "    address = 127.0.0.1",
            f"    port = {0 if self.tls == 'implicit' else self.port}",
            "  }",
            "  inet_listener imaps {",
            "    address = 127.0.0.1",
            f"    port = {self.port if self.tls == 'implicit' else 0}",
            "  }",
            "}",
        ]
        if self.ca is not None:
            lines += [f"ssl_cert = <{self.ca.cert_file}", f"ssl_key = <{self.ca.key_file}"]
        return "\n".join(lines) + "\n"

    def start(self, timeout: float = 20.0) -> ImapServer:
        if self.proc is not None and self.proc.poll() is None:
            return self
        self.proc = subprocess.Popen(
            [DOVECOT, "-F", "-c", str(self.dir / "dovecot.conf")],
            stdout=subprocess.DEVNULL,
            stderr=open(self.dir / "stderr.log", "ab"),  # noqa: SIM115 - the child keeps it
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dovecot exited at start:\n{self.log()}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock,
            ):
                if self.tls == "implicit" or sock.recv(64).startswith(b"* OK"):
                    return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"dovecot did not answer on port {self.port}:\n{self.log()}")

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the master (its children go with it) and wait until the port is free."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # our own session's group only
            proc.wait()
        with contextlib.suppress(FileNotFoundError):
            (self.dir / "run" / "master.pid").unlink()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def log(self) -> str:
        parts = []
        for name in ("dovecot.log", "stderr.log"):
            with contextlib.suppress(FileNotFoundError):
                parts.append((self.dir / name).read_text(errors="replace")[-4000:])
        return "\n".join(parts)

    # --- what clients see ---------------------------------------------------------------------

    @property
    def url(self) -> str:
        scheme = "imaps" if self.tls == "implicit" else "imap"
        tail = "?tls=off" if self.tls == "off" else ""
        auth = f"{quote(self.user, safe='')}:{quote(self.password, safe='')}"
        return f"{scheme}://{auth}@127.0.0.1:{self.port}/INBOX{tail}"

    def _client(self) -> imaplib.IMAP4:
        if self.tls == "implicit":
            assert self.ca is not None
            import ssl  # only TLS servers need it

            context = ssl.create_default_context(cafile=str(self.ca.ca_file))
            conn: imaplib.IMAP4 = imaplib.IMAP4_SSL("127.0.0.1", self.port, ssl_context=context)
        else:
            conn = imaplib.IMAP4("127.0.0.1", self.port, timeout=10)
        conn.login(self.user, self.password)
        return conn

    def append(self, raw: bytes, folder: str = "INBOX") -> int:
        """APPEND a mail; returns its UID."""
        conn = self._client()
        try:
            typ, data = conn.append(folder, None, None, raw)
            assert typ == "OK", data
            text = (data[0] or b"").decode()
            return int(text.split("APPENDUID", 1)[1].split()[1].rstrip("]"))
        finally:
            conn.logout()

    def uids(self, folder: str = "INBOX") -> list[int]:
        conn = self._client()
        try:
            conn.select(folder, readonly=True)
            _, data = conn.uid("SEARCH", None, "ALL")
            return [int(x) for x in (data[0] or b"").split()]
        finally:
            conn.logout()

    def _maildir(self) -> Path:
        return self.dir / "mail" / self.user

    def drop_into_maildir(self, raw: bytes) -> Path:
        """Deliver as a local delivery agent does: into tmp/, then renamed into new/."""
        box = self._maildir()
        for sub in ("tmp", "new", "cur"):
            (box / sub).mkdir(parents=True, exist_ok=True)
            os.chown(box / sub, self.mail_uid, self.mail_gid)
        os.chown(box, self.mail_uid, self.mail_gid)
        name = f"{time.time():.6f}.{uuid.uuid4().hex}.aw"
        tmp = box / "tmp" / name
        tmp.write_bytes(raw)
        os.chown(tmp, self.mail_uid, self.mail_gid)
        target = box / "new" / name
        tmp.rename(target)
        return target

    def new_uidvalidity(self) -> None:
        """Forget the folder's UID list (the server is stopped): the next start gives the
        folder a new UIDVALIDITY and numbers its mails again."""
        assert self.proc is None, "stop() the server first"
        box = self._maildir()
        for path in box.glob("dovecot*"):
            path.unlink()
        for path in (box / "cur").glob("*"):  # keep the mails, drop their UID-bearing names
            path.rename(box / "new" / path.name.split(":")[0])
