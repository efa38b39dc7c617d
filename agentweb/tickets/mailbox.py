"""Email in: the mailbox ``AGENTWEB_IMAP_URL`` names, polled by beat (DESIGN §11).

Beat asks every 2 s (``agentweb.tickets.tasks.poll_mailbox``); a poll runs when one is due
(every ``AGENTWEB_IMAP_POLL_SECONDS``) and no other holds the mailbox (a lease on its
``Mailbox`` row, claimed with a conditional UPDATE). It reads the folder read-only and
takes the mails past the last UID it imported, oldest first. Each mail is imported in one
transaction with its ``ImportedMail`` row (unique by UIDVALIDITY + UID and by Message-ID)
and the new last UID: a crash anywhere imports it wholly or not at all, a restart goes on
from the row, a new UIDVALIDITY starts the folder over and Message-IDs keep what was
already taken from coming twice. A mailbox that cannot be reached is logged (once per
outage), kept on the row and tried again at the next poll.

Threading: In-Reply-To/References naming a message of a ticket (ours included: a reply's
Message-ID is its message's ``external_id``), else ``[#<id>]`` in the subject from the
ticket's requester, else a new ticket (source ``email``, external id the Message-ID).
"""

from __future__ import annotations

import contextlib
import imaplib
import logging
import re
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from email.utils import parseaddr

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from agentweb.tickets import actions
from agentweb.tickets.config import ImapConfig
from agentweb.tickets.mailparse import ParsedMail, parse
from agentweb.tickets.models import EMAIL_SOURCE, ImportedMail, Mailbox, Message, Ticket

log = logging.getLogger(__name__)

TIMEOUT = 30.0  # seconds per network operation
LEASE = timedelta(minutes=10)
BATCH = 200  # mails per poll; the next poll is due at once while more are waiting
MAX_MAIL_BYTES = 25_000_000  # a larger mail is imported by its headers only
_SIZES = re.compile(rb"UID (\d+) RFC822\.SIZE (\d+)|RFC822\.SIZE (\d+) UID (\d+)")


class MailboxError(Exception):
    """The mailbox could not be read (unreachable, refused the login, no such folder)."""


@dataclass
class PollResult:
    polled: bool
    imported: int = 0
    skipped: int = 0
    error: str = ""


def poll_if_due() -> PollResult:
    config = settings.AGENTWEB_IMAP
    if config is None:
        return PollResult(polled=False)
    box = _claim(config)
    if box is None:
        return PollResult(polled=False)
    return _poll(config, box)


def poll_now(config: ImapConfig) -> PollResult:
    """A poll whether or not one is due (tests, the command line); still one at a time."""
    Mailbox.objects.get_or_create(key=config.key)
    Mailbox.objects.filter(key=config.key).update(next_poll_at=timezone.now())
    box = _claim(config)
    if box is None:
        return PollResult(polled=False)
    return _poll(config, box)


def _claim(config: ImapConfig) -> Mailbox | None:
    now = timezone.now()
    Mailbox.objects.get_or_create(key=config.key)
    claimed = Mailbox.objects.filter(
        Q(lease_until__isnull=True) | Q(lease_until__lt=now), key=config.key, next_poll_at__lte=now
    ).update(lease_until=now + LEASE)
    return Mailbox.objects.get(key=config.key) if claimed else None


def _poll(config: ImapConfig, box: Mailbox) -> PollResult:
    result = PollResult(polled=True)
    more = False
    try:
        with _session(config) as conn:
            uidvalidity = _select(conn, config)
            if box.uidvalidity != uidvalidity:
                if box.uidvalidity is not None:
                    log.warning(
                        "mailbox %s: UIDVALIDITY changed (%s -> %s); reading the folder again "
                        "(Message-IDs keep what was imported from coming twice)",
                        config.describe(), box.uidvalidity, uidvalidity,
                    )  # fmt: skip
                Mailbox.objects.filter(pk=box.pk).update(uidvalidity=uidvalidity, last_uid=0)
                box.uidvalidity, box.last_uid = uidvalidity, 0
            waiting = _new_uids(conn, box.last_uid)
            more = len(waiting) > BATCH
            for uid, size in waiting[:BATCH]:
                raw = _fetch(conn, uid, size)
                if _import(box, uidvalidity, uid, raw):
                    result.imported += 1
                else:
                    result.skipped += 1
    except MailboxError as exc:
        result.error = str(exc)
    except (OSError, imaplib.IMAP4.error, ssl.SSLError, EOFError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    _finish(config, box, result, more)
    return result


def _finish(config: ImapConfig, box: Mailbox, result: PollResult, more: bool) -> None:
    now = timezone.now()
    due = now if more else now + timedelta(seconds=settings.AGENTWEB_IMAP_POLL_SECONDS)
    fields: dict[str, object] = {"lease_until": None, "next_poll_at": due}
    if result.error:
        if not box.last_error:  # one line per outage, not one per poll
            log.warning(
                "mailbox %s cannot be read: %s; retrying every poll",
                config.describe(),
                result.error,
            )
        fields.update(last_error=result.error[:2000], last_error_at=now)
    else:
        if box.last_error:
            log.info("mailbox %s can be read again", config.describe())
        fields.update(last_error="", last_ok_at=now)
    Mailbox.objects.filter(pk=box.pk).update(**fields)
    if result.imported:
        log.info("mailbox %s: %d mails imported", config.describe(), result.imported)


@contextlib.contextmanager
def _session(config: ImapConfig) -> Iterator[imaplib.IMAP4]:
    conn = _connect(config)
    try:
        try:
            conn.login(config.username, config.password)
        except imaplib.IMAP4.error as exc:
            raise MailboxError(
                f"the server refused the login of {config.username!r}: {exc}"
            ) from None
        yield conn
    finally:
        with contextlib.suppress(Exception):
            conn.logout()


def _connect(config: ImapConfig) -> imaplib.IMAP4:
    context = ssl.create_default_context()
    try:
        if config.implicit_tls:
            return imaplib.IMAP4_SSL(config.host, config.port, ssl_context=context, timeout=TIMEOUT)
        conn = imaplib.IMAP4(config.host, config.port, timeout=TIMEOUT)
    except (socket.gaierror, ConnectionRefusedError, TimeoutError) as exc:
        raise MailboxError(f"cannot reach {config.host}:{config.port}: {exc}") from None
    if config.tls:
        if "STARTTLS" not in conn.capabilities:
            with contextlib.suppress(Exception):
                conn.logout()
            raise MailboxError(
                f"{config.host} does not offer STARTTLS: the password is not sent in clear "
                "(use imaps://, or ?tls=off for a test server on a loopback address)"
            )
        conn.starttls(ssl_context=context)
    return conn


def _quoted(folder: str) -> str:
    return '"' + folder.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _select(conn: imaplib.IMAP4, config: ImapConfig) -> int:
    typ, data = conn.select(_quoted(config.folder), readonly=True)
    if typ != "OK":
        detail = (data[0] or b"").decode(errors="replace") if data else ""
        raise MailboxError(f"cannot open folder {config.folder!r}: {detail}")
    _, values = conn.response("UIDVALIDITY")
    try:
        return int((values[0] or b"0").decode())
    except (ValueError, IndexError, AttributeError):
        raise MailboxError("the server sent no UIDVALIDITY for the folder") from None


def _new_uids(conn: imaplib.IMAP4, last_uid: int) -> list[tuple[int, int]]:
    """(UID, size) of the mails past ``last_uid``, oldest first. ``n:*`` also names the
    last mail when its UID is below n: those are left out here."""
    typ, data = conn.uid("FETCH", f"{last_uid + 1}:*", "(UID RFC822.SIZE)")
    if typ != "OK":
        raise MailboxError("the server refused to list the folder's mails")
    found: dict[int, int] = {}
    for item in data:
        line = item[0] if isinstance(item, tuple) else item
        if not isinstance(line, bytes):
            continue
        for m in _SIZES.finditer(line):
            uid, size = (m.group(1), m.group(2)) if m.group(1) else (m.group(4), m.group(3))
            found[int(uid)] = int(size)
    return sorted((uid, size) for uid, size in found.items() if uid > last_uid)


def _fetch(conn: imaplib.IMAP4, uid: int, size: int) -> bytes:
    part = "BODY.PEEK[HEADER]" if size > MAX_MAIL_BYTES else "BODY.PEEK[]"
    typ, data = conn.uid("FETCH", str(uid), f"({part})")
    if typ != "OK":
        raise MailboxError(f"the server refused to send mail UID {uid}")
    for item in data:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], bytes):
            raw = item[1]
            if size > MAX_MAIL_BYTES:
                note = (
                    f"(This mail of {size:,} bytes is too large to import; it is in the mailbox.)"
                )
                raw += b"\r\n" + note.encode()
            return raw
    raise MailboxError(f"the server sent no content for mail UID {uid}")


# --- one mail ----------------------------------------------------------------------------------


def _our_address() -> str:
    return parseaddr(settings.AGENTWEB_MAIL_FROM)[1].lower()


def _import(box: Mailbox, uidvalidity: int, uid: int, raw: bytes) -> bool:
    """Import one mail; False when it was taken before (or is a machine's or our own)."""
    mail = parse(raw)
    with transaction.atomic():
        try:
            with transaction.atomic():
                record = ImportedMail.objects.create(
                    mailbox=box, uidvalidity=uidvalidity, uid=uid, message_id=mail.message_id
                )
        except IntegrityError:
            record = None  # this UID or this Message-ID was imported already
        imported = False
        if record is not None:
            skipped = mail.automatic
            if not skipped and mail.from_email.lower() == _our_address():
                skipped = "our own mail"
            if skipped:
                ImportedMail.objects.filter(pk=record.pk).update(skipped=skipped[:100])
            else:
                message = _file(mail)
                ImportedMail.objects.filter(pk=record.pk).update(became=message)
                imported = message is not None
        Mailbox.objects.filter(pk=box.pk, last_uid__lt=uid).update(last_uid=uid)
        if imported:
            Mailbox.objects.filter(pk=box.pk).update(imported=box.imported + 1)
            box.imported += 1
    return imported


def thread_of(mail: ParsedMail) -> Ticket | None:
    """The ticket a mail answers, or None (a new conversation)."""
    if mail.references:
        known = (
            Message.objects.filter(external_id__in=mail.references)
            .order_by("-at")
            .values_list("ticket_id", flat=True)
            .first()
        )
        if known is not None:
            return Ticket.objects.filter(pk=known).first()
    tagged = mail.ticket_tag
    if tagged is not None:
        ticket = Ticket.objects.filter(pk=tagged).first()
        # [#id] is easy to write: only the ticket's own requester joins it this way.
        if ticket is not None and ticket.requester_email.lower() == mail.from_email.lower():
            return ticket
    return None


def _file(mail: ParsedMail) -> Message | None:
    incoming = actions.Incoming(
        source=EMAIL_SOURCE,
        external_id=mail.message_id,
        subject=mail.subject,
        body=mail.body or "(no text)",
        requester_email=mail.from_email,
        requester_name=mail.from_name,
        author=mail.from_name or mail.from_email,
        message_external_id=mail.message_id,
        quoted=mail.quoted,
        attachments=mail.attachments,
    )  # at: when it arrived here, so a thread reads in the order agentweb saw it
    ticket = thread_of(mail)
    if ticket is not None:
        return actions.do_add_incoming(ticket.pk, incoming)
    return actions.do_receive_ticket(incoming).message
