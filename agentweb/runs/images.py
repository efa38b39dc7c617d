"""The run's image store: images that tools return, kept once per run in PostgreSQL.

The runtime stores each image through ``DbImageStore.put`` and keeps only its reference
in the loop state and the ``tool_call_finished`` event (the URL of ``web:run_image``).
"""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.urls import reverse

from agentweb.runs.models import Run, RunImage
from agentweb.runtime.images import Image, StoredImage, image_size


class DbImageStore:
    def __init__(self, run: Run) -> None:
        self.run = run

    def put(self, image: Image) -> StoredImage:
        ref = image.sha256
        size = image_size(image.data)
        try:
            with transaction.atomic():
                RunImage.objects.get_or_create(
                    run=self.run,
                    sha256=ref,
                    defaults={
                        "media_type": image.media_type,
                        "width": size[0] if size else None,
                        "height": size[1] if size else None,
                        "size": len(image.data),
                        "data": image.data,
                    },
                )
        except IntegrityError:  # stored at the same moment by another attempt: same bytes
            pass
        return StoredImage(
            ref=ref,
            url=image_url(self.run.pk, ref),
            media_type=image.media_type,
            size=len(image.data),
            width=size[0] if size else None,
            height=size[1] if size else None,
        )

    def get(self, ref: str) -> bytes | None:
        row = RunImage.objects.filter(run=self.run, sha256=ref).values_list("data", flat=True)
        data = row.first()
        return bytes(data) if data is not None else None


def image_url(run_id: int, ref: str) -> str:
    return reverse("web:run_image", args=[run_id, ref])
