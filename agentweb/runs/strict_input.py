"""Request bodies that refuse unknown keys (422 naming them), and the fork's body
(DESIGN §14); kept beside ``api_input``, whose ``Input`` they extend."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Self

from pydantic import ConfigDict, Field

from agentweb.runs.api_input import Input, model_pattern
from agentweb.runs.errors import ActionError, InvalidArguments


class StrictInput(Input):
    """A request body whose unknown keys are refused (422 naming them), not ignored."""

    model_config = ConfigDict(strict=True, extra="forbid")

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> Self:
        unknown = sorted(str(k) for k in data if k not in cls.model_fields)
        if unknown:
            known = ", ".join(cls.model_fields)
            raise InvalidArguments(f"unknown keys: {', '.join(unknown)}; known: {known}")
        return super().parse(data)


class ForkRun(StrictInput):
    """Fork a run (DESIGN §14): a dry run from the source's conversation at ``at_seq``,
    continued by another profile version or model."""

    at_seq: int | None = Field(
        None, description="the source's event to fork after (inclusive); default its last"
    )
    agent: str | None = Field(None, description="the profile that continues; default the source's")
    version: int | None = Field(None, description="that profile's version; default its newest")
    model: str | None = Field(
        None,
        description="the model; default the version's, else the installation's AGENTWEB_MODEL",
        json_schema_extra={"pattern": model_pattern(blank=False)},
    )

    refusals: ClassVar[dict[str, tuple[type[ActionError], str]]] = {
        "at_seq": (InvalidArguments, "at_seq must be a whole number"),
        "agent": (InvalidArguments, "agent must be a profile name"),
        "version": (InvalidArguments, "version must be a whole number"),
        "model": (InvalidArguments, "model must be a string"),
    }
