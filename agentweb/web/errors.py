"""Error pages in the app's layout, for page URLs, also under DEBUG.

Django shows its technical 404 and 500 pages when DEBUG is on, and views answer 405
(``require_POST``) with an empty body. This middleware turns both into the app's own
page: exceptions (404, 403, 400, anything else as 500) and empty-bodied error responses.
JSON endpoints (``/api/``, ``/healthz``) and static files keep their own answers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.core.exceptions import BadRequest, PermissionDenied, SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.urls import Resolver404, resolve

from agentweb.middleware import exception_response

log = logging.getLogger("agentweb.web")

PAGES: dict[int, tuple[str, str]] = {
    400: ("Bad request", "The request could not be understood."),
    403: ("Not allowed", "Your role does not give you access to this page."),
    404: ("Not found", "There is nothing at this address, or it is not visible to you."),
    405: ("Wrong method", "This address does not answer that kind of request."),
    500: ("Something went wrong", "The error has been logged. Try again in a moment."),
}
SKIP_PREFIXES = ("/api/", "/healthz", "/static/", "/ws/")


def render_error(request: HttpRequest | None, status: int, detail: str = "") -> HttpResponse:
    title, text = PAGES.get(status, PAGES[500])
    body: str
    try:
        body = render_to_string(
            "errors/error.html",
            {"status": status, "title": title, "text": text, "detail": detail},
            request=request,
        )
    except Exception:  # the layout itself failed (database down?): plain words, no layout
        log.exception("error page failed to render")
        body = (
            f"<!doctype html><title>{status} {title}</title><h1>{status} {title}</h1><p>{text}</p>"
        )
    return HttpResponse(body, status=status)


def _is_page(request: HttpRequest) -> bool:
    return not request.path.startswith(SKIP_PREFIXES)


class ErrorPagesMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if _is_page(request):
            # An address no pattern matches never reaches a view (nor process_exception):
            # Django would answer with its URL-pattern listing under DEBUG.
            try:
                resolve(request.path_info)
            except Resolver404:
                return render_error(request, 404)
        response = self.get_response(request)
        if (
            _is_page(request)
            and response.status_code in PAGES
            and not getattr(response, "streaming", False)
            and not response.content
        ):
            allow = response.get("Allow")
            response = render_error(request, response.status_code)
            if allow:
                response["Allow"] = allow
        return response

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if not _is_page(request):
            return None
        if isinstance(exc, Http404):
            return render_error(request, 404)
        if isinstance(exc, PermissionDenied):
            return render_error(request, 403)
        if isinstance(exc, BadRequest | SuspiciousOperation):
            return render_error(request, 400)
        mapped = exception_response(request, exc)  # bad values 400, database down 503
        if mapped is not None:
            return mapped
        log.error("Internal error on %s %s", request.method, request.path, exc_info=exc)
        return render_error(request, 500)


# For DEBUG off, where Django calls these instead (urls.py names them).
def page_not_found(request: HttpRequest, exception: Any = None) -> HttpResponse:
    return render_error(request, 404)


def permission_denied(request: HttpRequest, exception: Any = None) -> HttpResponse:
    return render_error(request, 403)


def bad_request(request: HttpRequest, exception: Any = None) -> HttpResponse:
    return render_error(request, 400)


def server_error(request: HttpRequest) -> HttpResponse:
    return render_error(request, 500)
