"""Images in tool results: what a tool returns, and where the loop keeps them.

A tool returns ``ToolOutput(result, images=[Image(png_bytes)])``. The loop stores each
image once in an ``ImageStore`` and keeps only a reference (``Attachment.ref``) in the
conversation and the ``tool_call_finished`` event (``images: [{ref, url, ...}]``). The
bytes are read back from the store when a model call is prepared, and only for models
with vision.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .messages import Attachment, Message, ToolMessage, UserMessage

__all__ = [
    "MAX_IMAGES_PER_RESULT",
    "MAX_IMAGE_BYTES",
    "Image",
    "ImageStore",
    "MemoryImageStore",
    "StoredImage",
    "ToolOutput",
    "image_size",
    "store_images",
    "with_image_data",
]

log = logging.getLogger(__name__)

MAX_IMAGES_PER_RESULT = 4
MAX_IMAGE_BYTES = 5 * 1024 * 1024  # the largest image the providers accept
MEDIA_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) of a PNG, GIF or JPEG from its header; None when unknown."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        w, h = struct.unpack(">II", data[16:24])
        return int(w), int(h)
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        w, h = struct.unpack("<HH", data[6:10])
        return int(w), int(h)
    if data[:2] == b"\xff\xd8":
        i = 2
        while i + 9 < len(data):
            if data[i] != 0xFF:
                return None
            marker = data[i + 1]
            length = struct.unpack(">H", data[i + 2 : i + 4])[0]
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                h, w = struct.unpack(">HH", data[i + 5 : i + 9])
                return int(w), int(h)
            i += 2 + length
    return None


@dataclass(frozen=True, slots=True)
class Image:
    """Image bytes a tool returns. ``media_type`` is one of PNG, JPEG, GIF, WebP."""

    data: bytes
    media_type: str = "image/png"

    def __post_init__(self) -> None:
        if self.media_type not in MEDIA_TYPES:
            raise ValueError(
                f"unsupported image type {self.media_type!r}; use one of {MEDIA_TYPES}"
            )

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@dataclass(slots=True)
class ToolOutput:
    """A tool's return value with images: ``result`` is what the model reads as text."""

    result: Any
    images: list[Image] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class StoredImage:
    """Where a stored image lives: ``ref`` for the store, ``url`` for people."""

    ref: str
    url: str
    media_type: str
    size: int
    width: int | None = None
    height: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "url": self.url,
            "media_type": self.media_type,
            "size": self.size,
            "width": self.width,
            "height": self.height,
        }


class ImageStore(Protocol):
    """Keeps image bytes once; the loop asks for them back by ``ref``."""

    def put(self, image: Image) -> StoredImage: ...

    def get(self, ref: str) -> bytes | None: ...


class MemoryImageStore:
    """The default store of a runtime used alone: images live as long as the process."""

    def __init__(self) -> None:
        self._data: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def put(self, image: Image) -> StoredImage:
        ref = image.sha256
        with self._lock:
            self._data.setdefault(ref, image.data)
        size = image_size(image.data)
        return StoredImage(
            ref=ref,
            url=f"memory:{ref}",
            media_type=image.media_type,
            size=len(image.data),
            width=size[0] if size else None,
            height=size[1] if size else None,
        )

    def get(self, ref: str) -> bytes | None:
        with self._lock:
            return self._data.get(ref)


def store_images(
    store: ImageStore, images: Sequence[Image]
) -> tuple[list[Attachment], list[dict[str, Any]], list[str]]:
    """Store a tool result's images once. Returns what the conversation keeps (references),
    what the ``tool_call_finished`` event says of them (``images``) and notes on any left
    out (``image_notes``)."""
    attachments: list[Attachment] = []
    refs: list[dict[str, Any]] = []
    notes: list[str] = []
    for image in images[:MAX_IMAGES_PER_RESULT]:
        if len(image.data) > MAX_IMAGE_BYTES:
            notes.append(f"an image of {len(image.data)} bytes was over {MAX_IMAGE_BYTES}")
            continue
        try:
            stored = store.put(image)
        except Exception as exc:
            log.exception("storing an image failed")
            notes.append(f"an image could not be stored ({type(exc).__name__})")
            continue
        refs.append(stored.to_json())
        attachments.append(
            Attachment(
                media_type=stored.media_type,
                ref=stored.ref,
                width=stored.width,
                height=stored.height,
            )
        )
    if len(images) > MAX_IMAGES_PER_RESULT:
        notes.append(f"only the first {MAX_IMAGES_PER_RESULT} images were kept")
    return attachments, refs, notes


def with_image_data(messages: Sequence[Message], store: ImageStore, budget: int) -> list[Message]:
    """``messages`` with the bytes of stored images filled in for a model call: the most
    recent ``budget`` images (none for a model without vision), the others left out."""
    for m in messages:
        if isinstance(m, UserMessage | ToolMessage) and m.attachments:
            break
    else:
        return list(messages)  # nothing to fill in (most calls)
    out: list[Message] = []
    for m in reversed(messages):
        if not isinstance(m, UserMessage | ToolMessage) or not m.attachments:
            out.append(m)
            continue
        kept: list[Attachment] = []
        for a in reversed(m.attachments):
            if budget <= 0:
                break
            if not a.data and a.ref:
                try:
                    raw = store.get(a.ref)
                except Exception:
                    log.exception("image %s could not be read from the store", a.ref)
                    raw = None
                if raw is None:
                    continue
                a = a.model_copy(update={"data": base64.b64encode(raw).decode("ascii")})
            if a.data:
                kept.insert(0, a)
                budget -= 1
        out.append(m.model_copy(update={"attachments": kept}))
    out.reverse()
    return out
