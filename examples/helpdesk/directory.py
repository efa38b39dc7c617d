"""The stand-in for a company's directory (accounts, devices, licences): in memory, per
process, seeded the same way every time. A real integration calls its identity
provider, MDM and licence portal here instead. Writes are idempotent by key."""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, field
from typing import Any

LICENCE_SEATS = {"office": 500, "figma": 3, "adobe-cc": 2, "jetbrains": 10, "zoom": 200}
FREE_PRODUCTS = frozenset({"office", "zoom"})  # included for everyone: no approval


def _seed() -> dict[str, dict[str, Any]]:
    return {
        "a.kim": {
            "username": "a.kim",
            "name": "Alex Kim",
            "email": "alex.kim@example.com",
            "department": "Design",
            "manager": "m.ross",
            "locked": True,
            "failed_logins": 6,
            "mfa": True,
            "licences": ["office", "zoom"],
            "devices": ["LT-2041"],
        },
        "b.osei": {
            "username": "b.osei",
            "name": "Ben Osei",
            "email": "ben.osei@example.com",
            "department": "Engineering",
            "manager": "m.ross",
            "locked": False,
            "failed_logins": 0,
            "mfa": True,
            "licences": ["office", "zoom", "jetbrains"],
            "devices": ["LT-2042", "PH-0917"],
        },
        "m.ross": {
            "username": "m.ross",
            "name": "Maria Ross",
            "email": "maria.ross@example.com",
            "department": "Design",
            "manager": "",
            "locked": False,
            "failed_logins": 0,
            "mfa": False,
            "licences": ["office", "zoom", "figma"],
            "devices": ["LT-1999"],
        },
    }


DEVICES = {
    "LT-2041": {
        "asset_tag": "LT-2041",
        "kind": "laptop",
        "model": "ThinkPad T14",
        "os": "Windows 11",
        "owner": "a.kim",
        "encrypted": True,
    },
    "LT-2042": {
        "asset_tag": "LT-2042",
        "kind": "laptop",
        "model": "MacBook Pro 14",
        "os": "macOS 15",
        "owner": "b.osei",
        "encrypted": True,
    },
    "PH-0917": {
        "asset_tag": "PH-0917",
        "kind": "phone",
        "model": "Pixel 8",
        "os": "Android 15",
        "owner": "b.osei",
        "encrypted": True,
    },
    "LT-1999": {
        "asset_tag": "LT-1999",
        "kind": "laptop",
        "model": "MacBook Air 13",
        "os": "macOS 14",
        "owner": "m.ross",
        "encrypted": False,
    },
}


@dataclass
class Directory:
    accounts: dict[str, dict[str, Any]] = field(default_factory=_seed)
    devices: dict[str, dict[str, Any]] = field(default_factory=lambda: copy.deepcopy(DEVICES))
    done: dict[str, Any] = field(default_factory=dict)  # idempotency key -> first result
    tickets: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def seats_used(self, product: str) -> int:
        return sum(product in a["licences"] for a in self.accounts.values())


DIRECTORY = Directory()


def reset() -> None:
    """Back to the seeded state (tests)."""
    global DIRECTORY
    DIRECTORY = Directory()
