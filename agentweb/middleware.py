"""Hostile input stops at the edge, and every answer under ``/api/`` is JSON (README, JSON API).

One mechanism instead of per-field patches:

- ``strict_json`` parses JSON as PostgreSQL's ``jsonb`` and our pages can keep it: no
  ``NaN``/``Infinity``, no number that overflows (``1e999``, integers past 64 bits), no
  nesting deeper than ``MAX_JSON_DEPTH``, no NUL character and no unpaired surrogate.
- ``EdgeMiddleware`` checks every request once: the path, the query string, form fields,
  cookies and (under ``/api/``) the JSON body. A bad request is answered 400 with a
  message that says what was wrong (JSON under ``/api/``, the app's page elsewhere);
  a body over ``MAX_API_BODY`` is 413. It maps what still escapes a view: PostgreSQL
  refusing a value (``DataError``) is 400, PostgreSQL unreachable is 503. Under ``/api/``
  and ``/hooks/`` any error answer that is not JSON yet (404 for unknown paths, 405, 413,
  500) is replaced by ``{"error": {"code", "message"}}`` (a webhook's body is parsed by its
  view, after the signature is checked).
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable
from typing import Any

from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.db import DataError, InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.utils.html import escape

from agentweb.health import healthz

log = logging.getLogger(__name__)

MAX_API_BODY = 1_000_000  # bytes of a JSON request body
MAX_JSON_DEPTH = 64
MAX_INT = 2**63 - 1  # PostgreSQL bigint; larger JSON integers are refused
#: What no text of a request may hold, as a regex character class: NUL (PostgreSQL cannot
#: store it) and unpaired surrogates (not Unicode). The OpenAPI document's patterns exclude
#: NUL (``agentweb.runs.api_input.TEXT``); surrogates are not Unicode scalar values, which
#: JSON Schema's patterns match, so the document says that in words.
NUL = "\\u0000"
BAD_CHARS = f"{NUL}\\ud800-\\udfff"
_BAD_CHARS = re.compile(f"[{BAD_CHARS}]")
_FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


class BadInput(ValueError):
    """Input we refuse, with a message for the person who sent it."""


def bad_chars(text: str) -> str | None:
    """What is wrong with ``text`` for storage, or None."""
    found = _BAD_CHARS.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return "contains a NUL character (\\u0000), which cannot be stored"
    return "contains an unpaired surrogate (\\ud800-\\udfff), which is not valid Unicode"


def _reject_constant(name: str) -> Any:
    raise BadInput(f"{name} is not a JSON number we accept (use a finite number or null)")


def _finite_float(text: str) -> float | int:
    """A number with a fraction or exponent: as JSON Schema counts numbers, a whole one is
    an integer (``20.0`` is ``20``), and none may be larger than a 64-bit integer."""
    value = float(text)
    if not math.isfinite(value) or not -MAX_INT - 1 <= value <= MAX_INT:
        raise BadInput(f"the number {text[:40]} is out of range (at most 64 bits)")
    if value.is_integer():
        return int(value)
    return value


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > 19:
        raise BadInput(f"the integer {text[:40]}… is out of range (at most 64 bits)")
    value = int(text)
    if not -MAX_INT - 1 <= value <= MAX_INT:
        raise BadInput(f"the integer {text} is out of range (at most 64 bits)")
    return value


def _check_tree(value: Any, max_depth: int) -> None:
    """Depth and strings of a parsed document, without recursion."""
    stack: list[tuple[Any, int, str]] = [(value, 1, "$")]
    while stack:
        item, depth, where = stack.pop()
        if isinstance(item, str):
            problem = bad_chars(item)
            if problem:
                raise BadInput(f"the text at {where} {problem}")
        elif isinstance(item, dict | list):
            if depth > max_depth:
                raise BadInput(f"the JSON is nested too deeply (more than {max_depth} levels)")
            if isinstance(item, dict):
                for key, child in item.items():
                    problem = bad_chars(key)
                    if problem:
                        raise BadInput(f"a key at {where} {problem}")
                    stack.append((child, depth + 1, f"{where}.{key[:40]}"))
            else:
                for i, child in enumerate(item):
                    stack.append((child, depth + 1, f"{where}[{i}]"))


def strict_json(raw: bytes | str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Parse JSON we can store and show; raises ``BadInput`` with a message for people."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadInput(f"the body is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        value = json.loads(
            raw,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
            parse_int=_bounded_int,
        )
    except RecursionError:
        raise BadInput(f"the JSON is nested too deeply (more than {max_depth} levels)") from None
    except json.JSONDecodeError as exc:
        raise BadInput(
            f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except ValueError as exc:  # BadInput, or int() refusing a 4,300-digit number
        raise BadInput(
            str(exc) if isinstance(exc, BadInput) else "a number is out of range"
        ) from None
    _check_tree(value, max_depth)
    return value


def request_json(request: HttpRequest) -> Any:
    """The request's JSON body, parsed strictly (cached on the request)."""
    cached = getattr(request, "_strict_json", _MISSING)
    if cached is not _MISSING:
        return cached
    value = strict_json(request.body) if request.body else None
    request._strict_json = value  # type: ignore[attr-defined]
    return value


_MISSING = object()

_STATUS_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    408: "timeout",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid",
    429: "too_many_requests",
    431: "headers_too_large",
    500: "server_error",
    503: "unavailable",
}
_STATUS_MESSAGES = {
    404: "no such API path (see /api/openapi.json)",
    405: "method not allowed here",
    413: f"the request body is larger than {MAX_API_BODY:,} bytes",
    415: "send the request body as JSON (Content-Type: application/json)",
    500: "internal error; it was logged",
    503: "the database is unavailable; try again shortly",
}


def is_api(request: HttpRequest) -> bool:
    """Paths whose every answer is JSON: the API and the webhooks."""
    return request.path_info.startswith(("/api/", "/hooks/"))


def _parses_json_body(request: HttpRequest) -> bool:
    """The API's bodies are parsed here; a webhook's only after its signature checked."""
    return request.path_info.startswith("/api/")


def refuse(request: HttpRequest, status: int, code: str, message: str) -> HttpResponse:
    """An error answer: JSON under /api/, a page of the app elsewhere."""
    if is_api(request):
        return JsonResponse({"error": {"code": code, "message": message}}, status=status)
    html: str
    try:
        html = render_to_string(
            "web/refused.html", {"status": status, "message": message}, request=request
        )
    except Exception:  # the page must not fail too (the database may be down)
        html = f"<!doctype html><title>{status}</title><h1>{status}</h1><p>{escape(message)}</p>"
    return HttpResponse(html, status=status)


def no_role_page(request: HttpRequest) -> HttpResponse:
    """The one page a signed-in user without a role sees, wherever they go (403)."""
    return HttpResponse(render_to_string("errors/no_role.html", request=request), status=403)


def exception_response(request: HttpRequest, exc: Exception) -> HttpResponse | None:
    """The answer to an exception that is not a bug of ours, or None (then it is a 500)."""
    if isinstance(exc, BadInput):
        return refuse(request, 400, "bad_input", str(exc))
    if isinstance(exc, RequestDataTooBig):
        return refuse(request, 413, "too_large", _STATUS_MESSAGES[413])
    if isinstance(exc, DataError):
        # PostgreSQL refused a value of this request (a NUL, a number out of range ...):
        # the request is at fault, and the reason is worth saying.
        text = str(exc).strip()
        reason = text.splitlines()[0][:200] if text else "invalid value"
        log.warning("database refused a value of %s %s: %s", request.method, request.path, reason)
        return refuse(request, 400, "bad_input", f"a value cannot be stored: {reason}")
    if isinstance(exc, OperationalError | InterfaceError):
        log.error("database unavailable during %s %s: %s", request.method, request.path, exc)
        response = refuse(request, 503, "unavailable", _STATUS_MESSAGES[503])
        response["Retry-After"] = "5"
        return response
    return None


class EdgeMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info == "/healthz":
            # Before host validation and the HTTPS redirect: the container's health check
            # asks http://127.0.0.1, and must see the database's state, not a 301 or 400.
            return healthz(request)
        refused = self._check(request)
        if refused is not None:
            return refused
        response = self.get_response(request)
        if is_api(request) and response.status_code >= 400:
            response = self._as_json(request, response)
        return response

    def _check(self, request: HttpRequest) -> HttpResponse | None:
        problem = bad_chars(request.path_info)
        if problem:
            return refuse(request, 400, "bad_input", f"the path {problem}")
        try:
            for name, values in request.GET.lists():
                for text in (name, *values):
                    problem = bad_chars(text)
                    if problem:
                        return refuse(
                            request, 400, "bad_input", f"query parameter {name[:40]!r} {problem}"
                        )
            for name, value in request.COOKIES.items():
                if bad_chars(name) or bad_chars(value):
                    return refuse(request, 400, "bad_input", "a cookie contains a NUL character")
            content_type = request.content_type or ""
            if request.method in ("POST", "PUT", "PATCH", "DELETE"):
                # The API reads JSON bodies only. The body is read first, so that parsing
                # the form leaves it readable (an empty form, as test clients send with a
                # bodiless POST, goes on).
                multipart = is_api(request) and content_type == "multipart/form-data"
                if multipart and request.body and (request.POST or request.FILES):
                    return refuse(request, 415, "unsupported_media_type", _STATUS_MESSAGES[415])
                if content_type in _FORM_TYPES:
                    for name, values in request.POST.lists():
                        for text in (name, *values):
                            problem = bad_chars(text)
                            if problem:
                                return refuse(
                                    request, 400, "bad_input", f"the field {name[:40]!r} {problem}"
                                )
                elif is_api(request):
                    length = request.META.get("CONTENT_LENGTH") or "0"
                    if not length.isdecimal() or int(length) > MAX_API_BODY:
                        return refuse(request, 413, "too_large", _STATUS_MESSAGES[413])
                    if len(request.body) > MAX_API_BODY:
                        return refuse(request, 413, "too_large", _STATUS_MESSAGES[413])
                    if request.body and _parses_json_body(request):
                        request_json(request)
        except BadInput as exc:
            return refuse(request, 400, "invalid_json", f"request body: {exc}")
        except RequestDataTooBig:
            return refuse(request, 413, "too_large", _STATUS_MESSAGES[413])
        except SuspiciousOperation as exc:
            return refuse(request, 400, "bad_request", str(exc)[:200] or "bad request")
        return None

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        return exception_response(request, exc)

    def _as_json(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        if response.get("Content-Type", "").startswith("application/json"):
            return response
        status = response.status_code
        code = _STATUS_CODES.get(status, "error")
        message = _STATUS_MESSAGES.get(status) or response.reason_phrase or "error"
        replaced = JsonResponse({"error": {"code": code, "message": message}}, status=status)
        for header in ("Allow", "Retry-After", "WWW-Authenticate"):
            if header in response:
                replaced[header] = response[header]
        return replaced


class RoleRequiredMiddleware:
    """No role, no data: a signed-in user in none of the roles (operator, approver, admin)
    gets 403 on every page and API call except logging in and out: on a page, one page
    that says to ask an administrator for a role (no API tokens either)."""

    EXEMPT = ("/accounts/", "/healthz", "/static/", "/admin/", "/metrics", "/hooks/")

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        user = getattr(request, "user", None)
        if (
            user is not None
            and user.is_authenticated
            and not request.path_info.startswith(self.EXEMPT)
            and not user.has_perm("runs.view_run")
        ):
            if not is_api(request):
                return no_role_page(request)
            return refuse(
                request,
                403,
                "no_role",
                "Your account has no role yet (operator, approver or admin): "
                "ask an administrator to give you one.",
            )
        return self.get_response(request)
