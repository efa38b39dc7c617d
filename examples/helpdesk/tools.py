"""The IT helpdesk tools. Low risk reads run at once; unlocking an account is medium
risk; a password reset, a paid licence and a new account need a person's approval.

Every refusal is a ``ToolError`` whose message the model reads as it is ("No account
'jdoe' ..."). Writes pass ``ctx.call_id`` (scoped by the run) as their idempotency key.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from agentweb.runtime import ContextHints, ToolContext, ToolError, tool

from . import directory as d

Product = Literal["office", "figma", "adobe-cc", "jetbrains", "zoom"]

#: What the context policy should pin and how people say things (DESIGN §6).
CONTEXT_HINTS = ContextHints(
    fact_keys=("username", "asset_tag", "product", "ticket_number"),
    fact_patterns={"asset_tag": r"\b((?:LT|PH)-\d{4})\b", "username": r"\b([a-z]\.[a-z]{2,})\b"},
    synonyms={
        "locked": ("unlock", "account"),
        "login": ("account", "password", "unlock"),
        "forgot": ("password", "reset"),
        "license": ("licence",),
        "seat": ("licence",),
        "laptop": ("device",),
        "phone": ("device",),
        "broken": ("device", "hardware"),
        "hire": ("account", "create"),
    },
    summary_prompt=(
        "You compress the earlier part of an IT helpdesk agent's work. In at most {words} "
        "words: accounts, devices and licences looked at (exact usernames and asset tags), "
        "what was changed, what a person approved or rejected and why, what is still open."
    ),
)


def _account(username: str) -> dict[str, Any]:
    account = d.DIRECTORY.accounts.get(username.strip().lower())
    if account is None:
        known = ", ".join(sorted(d.DIRECTORY.accounts))
        raise ToolError(
            f"No account {username!r}. Usernames look like 'a.kim' (first initial, dot, "
            f"last name); find_account searches by name or email. Known here: {known}."
        )
    return account


def _key(ctx: ToolContext | None, what: str) -> str | None:
    if ctx is None or not ctx.call_id:
        return None
    return f"{ctx.run_id}:{ctx.call_id}:{what}"


def _once(ctx: ToolContext | None, what: str, write: Any) -> Any:
    """Run ``write`` once per call id: a repeated call returns the first result."""
    key = _key(ctx, what)
    with d.DIRECTORY.lock:
        if key is not None and key in d.DIRECTORY.done:
            return d.DIRECTORY.done[key]
        result = write()
        if key is not None:
            d.DIRECTORY.done[key] = result
        return result


def _public(account: dict[str, Any]) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, list) else v) for k, v in account.items()}


# --- reads --------------------------------------------------------------------------------


@tool(read_only=True)
def find_account(query: str) -> dict[str, Any]:
    """Find accounts by part of a name, username or email address.

    Args:
        query: A name, username or email, e.g. "Alex" or "kim@".
    """
    q = query.strip().lower()
    if len(q) < 2:
        raise ToolError("Search with at least two characters of a name, username or email.")
    found = [
        {"username": a["username"], "name": a["name"], "email": a["email"]}
        for a in d.DIRECTORY.accounts.values()
        if q in a["username"] or q in a["name"].lower() or q in a["email"]
    ]
    return {"query": query, "accounts": found}


@tool(read_only=True)
def get_account(username: str) -> dict[str, Any]:
    """An account: status (locked, failed logins, MFA), department, manager, licences
    and devices.

    Args:
        username: The username, e.g. "a.kim".
    """
    return _public(_account(username))


@tool(read_only=True)
def get_device(asset_tag: str) -> dict[str, Any]:
    """A device by its asset tag: kind, model, operating system, owner, disk encryption.

    Args:
        asset_tag: The tag on the device, e.g. "LT-2041".
    """
    device = d.DIRECTORY.devices.get(asset_tag.strip().upper())
    if device is None:
        raise ToolError(f"No device {asset_tag!r}. Asset tags look like 'LT-2041' or 'PH-0917'.")
    return dict(device)


@tool(read_only=True)
def licence_seats(product: Product) -> dict[str, Any]:
    """How many seats of a software licence exist and are in use.

    Args:
        product: The product.
    """
    total, used = d.LICENCE_SEATS[product], d.DIRECTORY.seats_used(product)
    return {"product": product, "seats": total, "used": used, "free": total - used}


# --- writes -------------------------------------------------------------------------------


@tool(risk="medium")
def unlock_account(username: str, reason: str, *, ctx: ToolContext | None = None) -> dict[str, Any]:
    """Unlock an account locked after failed logins (the password stays the same).

    Args:
        username: The username.
        reason: Why, for the audit log.
    """
    account = _account(username)

    def write() -> dict[str, Any]:
        if not account["locked"]:
            raise ToolError(f"{account['username']} is not locked; nothing to unlock.")
        account["locked"], account["failed_logins"] = False, 0
        return {"username": account["username"], "locked": False, "reason": reason}

    return _once(ctx, "unlock", write)


@tool(risk="high")
def reset_password(username: str, reason: str, *, ctx: ToolContext | None = None) -> dict[str, Any]:
    """Reset a password: the user gets a one-time reset link by email. Needs approval.

    Args:
        username: The username.
        reason: Why, for the audit log.
    """
    account = _account(username)

    def write() -> dict[str, Any]:
        account["locked"], account["failed_logins"] = False, 0
        return {
            "username": account["username"],
            "reset_link_sent_to": account["email"],
            "expires_in_hours": 24,
        }

    return _once(ctx, "reset", write)


def _paid(args: dict[str, Any]) -> bool:
    """Approval policy of assign_licence: paid products need a person."""
    return args.get("product") not in d.FREE_PRODUCTS


@tool(risk="high", approval=_paid)
def assign_licence(
    username: str, product: Product, reason: str, *, ctx: ToolContext | None = None
) -> dict[str, Any]:
    """Give a user a software licence. Paid products need approval.

    Args:
        username: The username.
        product: The product.
        reason: Why the user needs it.
    """
    account = _account(username)

    def write() -> dict[str, Any]:
        if product in account["licences"]:
            raise ToolError(f"{account['username']} already has a {product} licence.")
        free = d.LICENCE_SEATS[product] - d.DIRECTORY.seats_used(product)
        if free <= 0:
            raise ToolError(
                f"No free {product} seat ({d.LICENCE_SEATS[product]} in use). Ask whether "
                "a seat can be taken back from someone who left, or buy one."
            )
        account["licences"].append(product)
        return {"username": account["username"], "product": product, "seats_free": free - 1}

    return _once(ctx, f"licence:{product}", write)


@tool(risk="medium")
def open_hardware_ticket(
    asset_tag: str, problem: str, *, ctx: ToolContext | None = None
) -> dict[str, Any]:
    """Open a repair ticket for a device with the hardware team.

    Args:
        asset_tag: The device's asset tag.
        problem: What is wrong, in the user's words.
    """
    device = get_device.fn(asset_tag)

    def write() -> dict[str, Any]:
        number = f"HW-{len(d.DIRECTORY.tickets) + 101}"
        ticket = {"ticket_number": number, "asset_tag": device["asset_tag"], "problem": problem}
        d.DIRECTORY.tickets.append(ticket)
        return {**ticket, "loaner": device["kind"] == "laptop"}

    return _once(ctx, "hardware", write)


@tool(risk="high")
def create_account(
    first_name: str,
    last_name: str,
    department: str,
    manager: str,
    title: str,
    start_date: str,
    location: str,
    *,
    ctx: ToolContext | None = None,
) -> dict[str, Any]:
    """Create an account for a new hire. Needs approval.

    Args:
        first_name: Given name.
        last_name: Family name.
        department: Department, e.g. "Design".
        manager: The manager's username.
        title: Job title.
        start_date: First working day, YYYY-MM-DD.
        location: Office or "remote".
    """
    if not re.fullmatch(r"20\d\d-\d\d-\d\d", start_date):
        raise ToolError(f"start_date {start_date!r} is not a date like 2026-12-01.")
    _account(manager)
    username = f"{first_name.strip()[:1]}.{last_name.strip()}".lower().replace(" ", "")

    def write() -> dict[str, Any]:
        if username in d.DIRECTORY.accounts:
            raise ToolError(f"{username} exists already; check find_account first.")
        d.DIRECTORY.accounts[username] = {
            "username": username,
            "name": f"{first_name} {last_name}",
            "email": f"{username.replace('.', '.')}@example.com",
            "department": department,
            "manager": manager,
            "title": title,
            "start_date": start_date,
            "location": location,
            "locked": False,
            "failed_logins": 0,
            "mfa": False,
            "licences": ["office", "zoom"],
            "devices": [],
        }
        return {"username": username, "start_date": start_date}

    return _once(ctx, "create", write)


def demo_model() -> Any:
    """The scripted model ``AGENTWEB_MODEL=demo`` plays for this domain."""
    from .demo import HelpdeskDemoModel

    return HelpdeskDemoModel()
