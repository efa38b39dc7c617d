"""A received mail as a ticket message: who, subject, threading ids, the new text (plain
text preferred, HTML reduced to text), the quoted history below it kept apart, and the
attachments by name and size. Pure Python (``email`` and ``html.parser``); text that
PostgreSQL cannot store (NUL, lone surrogates) is replaced, never an error."""

from __future__ import annotations

import contextlib
import hashlib
import re
from dataclasses import dataclass, field
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from email.utils import getaddresses
from html.parser import HTMLParser
from typing import Any

_MSGID = re.compile(r"<[^<>\s]{1,900}>")
_TICKET_TAG = re.compile(r"\[#([0-9]{1,18})\]")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_AUTO = ("auto_reply", "bulk", "junk")


def clean(text: str) -> str:
    return _UNSTORABLE.sub("\ufffd", text)


@dataclass
class ParsedMail:
    message_id: str
    subject: str
    from_email: str
    from_name: str
    references: list[str]  # In-Reply-To first, then References, newest first
    body: str
    quoted: str
    attachments: list[dict[str, Any]] = field(default_factory=list)
    automatic: str = ""  # why this is a machine's mail (an auto-reply, a bulk mail)

    @property
    def ticket_tag(self) -> int | None:
        found = _TICKET_TAG.search(self.subject)
        return int(found.group(1)) if found else None


def _header(msg: EmailMessage, name: str) -> str:
    try:
        value = msg.get(name)
    except Exception:  # a header the policy cannot parse: its raw text
        value = msg.get_all(name, [""])[0] if msg.get_all(name) else ""
    return clean(str(value or "")).strip()


def _ids(value: str) -> list[str]:
    return _MSGID.findall(value)


def parse(raw: bytes) -> ParsedMail:
    msg = BytesParser(policy=policy.default).parsebytes(raw)
    assert isinstance(msg, EmailMessage)
    found = _ids(_header(msg, "Message-ID"))
    message_id = found[0] if found else f"<sha256-{hashlib.sha256(raw).hexdigest()[:40]}@agentweb>"
    in_reply_to = _ids(_header(msg, "In-Reply-To"))
    references = list(reversed(_ids(_header(msg, "References"))))
    refs = list(dict.fromkeys(in_reply_to + references))
    from_name, from_email = "", ""
    pairs = getaddresses([_header(msg, "From")])
    if pairs:
        from_name, from_email = pairs[0][0].strip(), pairs[0][1].strip()
    subject = " ".join(_header(msg, "Subject").split())
    text, attachments = _content(msg)
    body, quoted = split_quoted(text)
    return ParsedMail(
        message_id=message_id,
        subject=subject[:500],
        from_email=from_email[:320],
        from_name=from_name[:200],
        references=refs[:50],
        body=body,
        quoted=quoted,
        attachments=attachments,
        automatic=_automatic(msg),
    )


def _automatic(msg: EmailMessage) -> str:
    auto = _header(msg, "Auto-Submitted").lower()
    if auto and auto != "no":
        return f"Auto-Submitted: {auto[:40]}"
    precedence = _header(msg, "Precedence").lower()
    if precedence in _AUTO:
        return f"Precedence: {precedence}"
    if _header(msg, "X-Autoreply") or _header(msg, "X-Autorespond"):
        return "an auto-reply"
    return ""


def _decoded(part: EmailMessage) -> str:
    try:
        content = part.get_content()
    except Exception:  # an unknown charset or a broken transfer encoding
        payload = part.get_payload(decode=True)
        raw = payload if isinstance(payload, bytes) else b""
        content = raw.decode("utf-8", "replace")
    if isinstance(content, bytes):
        content = content.decode("utf-8", "replace")
    return clean(str(content))


def _content(msg: EmailMessage) -> tuple[str, list[dict[str, Any]]]:
    plain: str | None = None
    html: str | None = None
    attachments: list[dict[str, Any]] = []
    for part in msg.walk():
        if part.is_multipart():
            continue
        filename = part.get_filename()
        disposition = part.get_content_disposition()
        kind = part.get_content_type()
        if filename or disposition == "attachment":
            payload = part.get_payload(decode=True)
            size = len(payload) if isinstance(payload, bytes) else 0
            attachments.append({"name": clean(filename or "(unnamed)")[:255], "size": size})
            continue
        if kind == "text/plain" and plain is None:
            plain = _decoded(part)
        elif kind == "text/html" and html is None:
            html = _decoded(part)
    if plain is not None and plain.strip():
        text = plain
    elif html is not None:
        text = html_to_text(html)
    else:
        text = plain or ""
    return text.replace("\r\n", "\n").replace("\r", "\n"), attachments


# --- HTML to text ----------------------------------------------------------------------------

_BLOCKS = {
    "p", "div", "br", "tr", "li", "ul", "ol", "table", "h1", "h2", "h3", "h4", "h5", "h6",
    "blockquote", "pre", "hr", "section", "article", "header", "footer",
}  # fmt: skip
_HIDDEN = {"script", "style", "head", "title", "template", "noscript"}


class _Text(HTMLParser):
    """Text with one line per block; a blockquote's lines start with "> " (so the quoted
    history below a reply is found as in plain text)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: list[str] = [""]
        self.quote = 0
        self.hidden = 0
        self.pre = 0

    def _break(self) -> None:
        if self.lines[-1].strip(" >"):
            self.lines.append("")
        self.lines[-1] = "> " * self.quote

    def _br(self) -> None:
        self.lines.append("> " * self.quote)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _HIDDEN:
            self.hidden += 1
        elif tag == "br":
            self._br()
        elif tag in _BLOCKS:
            self.quote += tag == "blockquote"
            self.pre += tag == "pre"
            self._break()
            if tag == "li":
                self.lines[-1] += "- "

    def handle_endtag(self, tag: str) -> None:
        if tag in _HIDDEN:
            self.hidden = max(0, self.hidden - 1)
        elif tag in _BLOCKS and tag != "br":
            self.quote = max(0, self.quote - (tag == "blockquote"))
            self.pre = max(0, self.pre - (tag == "pre"))
            self._break()

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "br":
            self._br()
        elif tag in _BLOCKS:
            self._break()

    def handle_data(self, data: str) -> None:
        if self.hidden:
            return
        if self.pre:
            first, *rest = data.split("\n")
            self.lines[-1] += first
            self.lines += ["> " * self.quote + chunk for chunk in rest]
            return
        text = re.sub(r"\s+", " ", data)
        if not self.lines[-1].strip(" >-"):
            text = text.lstrip()
        self.lines[-1] += text


def html_to_text(html: str) -> str:
    parser = _Text()
    with contextlib.suppress(Exception):  # malformed markup: what was read so far
        parser.feed(html)
        parser.close()
    lines = [line.rstrip() for line in parser.lines]
    text = "\n".join(lines)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


# --- quoted history ----------------------------------------------------------------------------

_WROTE = re.compile(
    r"^\s*(On|Am|Le|El|Il|Op)\b.{0,400}"
    r"(wrote|schrieb|a écrit|escribió|ha scritto|schreef)\s*:\s*$",
    re.I,
)
_ORIGINAL = re.compile(
    r"^\s*-{2,}\s*(Original Message|Ursprüngliche Nachricht|Forwarded message)\s*-{2,}", re.I
)
_OUTLOOK_FROM = re.compile(r"^\s*(From|Von|De)\s*:\s*\S", re.I)
_OUTLOOK_NEXT = re.compile(r"^\s*(Sent|Date|Gesendet|Envoyé|To|An)\s*:", re.I)


def split_quoted(text: str) -> tuple[str, str]:
    """The new text and the history quoted below it. A quote between new lines (an
    answer written inline) is not history: then all of it is new text."""
    lines = text.split("\n")
    cut = None
    for i, line in enumerate(lines):
        joined = line + " " + lines[i + 1] if i + 1 < len(lines) else line
        if _WROTE.match(line) or (_WROTE.match(joined) and not line.rstrip().endswith(":")):
            cut = i
            break
        if _ORIGINAL.match(line):
            cut = i
            break
        if _OUTLOOK_FROM.match(line) and any(_OUTLOOK_NEXT.match(n) for n in lines[i + 1 : i + 5]):
            cut = i
            break
        if line.lstrip().startswith(">") and all(
            not rest.strip() or rest.lstrip().startswith(">") for rest in lines[i:]
        ):
            cut = i
            break
    if cut is None:
        return text.strip(), ""
    new, quoted = "\n".join(lines[:cut]).strip(), "\n".join(lines[cut:]).strip()
    if not new:  # nothing but a quote: keep it as the text
        return text.strip(), ""
    return new, quoted
