"""Settings of the workbench tools, read from the environment when a call needs them.

The Django settings read the same variables (``AGENTWEB_DATA_DIR``,
``AGENTWEB_WORKSPACE_RETENTION_DAYS``, ``AGENTWEB_HTTP_ALLOW``) and stop start-up on a bad
value; here they are read per call so a test or an operator can change them.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def data_dir() -> Path:
    raw = os.environ.get("AGENTWEB_DATA_DIR", "").strip()
    path = Path(raw) if raw else ROOT / "var" / "data"
    return path if path.is_absolute() else ROOT / path


def workspaces_dir() -> Path:
    return data_dir() / "workspaces"


def retention_days() -> int:
    raw = os.environ.get("AGENTWEB_WORKSPACE_RETENTION_DAYS", "").strip()
    return int(raw) if raw else 30


def parse_allow(raw: str) -> list[IPNetwork]:
    """``AGENTWEB_HTTP_ALLOW``: comma-separated IP addresses or CIDR networks."""
    nets: list[IPNetwork] = []
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        try:
            nets.append(ipaddress.ip_network(item, strict=False))
        except ValueError as exc:
            raise ValueError(
                f"AGENTWEB_HTTP_ALLOW: {item!r} is not an IP address or CIDR network"
            ) from exc
    return nets


def http_allow() -> list[IPNetwork]:
    return parse_allow(os.environ.get("AGENTWEB_HTTP_ALLOW", ""))
