"""Signing in and out (password, company sign-in) and the user's own API tokens."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST
from django.views.generic import View
from mozilla_django_oidc.views import (
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
    OIDCLogoutView,
)

from agentweb.accounts import oidc
from agentweb.accounts.models import ApiToken
from agentweb.accounts.roles import start_page

log = logging.getLogger("agentweb.accounts")

NAME_MAX = ApiToken._meta.get_field("name").max_length or 100
# The raw token lives in the session only until the next page shows it, then it is gone.
_SHOW_ONCE = "agentweb.new_token"


class Request(HttpRequest):
    user: User  # login_required


@login_required
@require_http_methods(["GET", "POST"])
def tokens(request: Request) -> HttpResponse:
    error = ""
    name = ""
    if request.method == "POST":
        name = " ".join(request.POST.get("name", "").split())
        if not name:
            error = "Give the token a name, so you can tell it apart later."
        elif len(name) > NAME_MAX:
            error = f"The name is longer than {NAME_MAX} characters."
        else:
            raw = ApiToken.issue(request.user, name=name)
            request.session[_SHOW_ONCE] = {"name": name, "token": raw}
            return redirect("accounts:tokens")  # a reload must not create another
    new = request.session.pop(_SHOW_ONCE, None)
    rows = ApiToken.objects.filter(user=request.user).order_by("-created_at")
    return render(
        request,
        "accounts/tokens.html",
        {"tokens": rows, "new": new, "error": error, "name": name, "name_max": NAME_MAX},
        status=400 if error else 200,
    )


@login_required
@require_POST
def revoke(request: Request, token_id: int) -> HttpResponse:
    # Only one's own tokens: another user's id is the same "not found" as a missing one.
    deleted, _ = ApiToken.objects.filter(pk=token_id, user=request.user).delete()
    if deleted:
        messages.success(request, "Token revoked: requests with it are refused from now on.")
    else:
        messages.error(request, "No such token (already revoked?).")
    return redirect("accounts:tokens")


class LoginView(auth_views.LoginView):
    """Django's login form, and beside it (or instead of it, ``AGENTWEB_LOCAL_LOGIN=0``)
    "Sign in with <OIDC_DISPLAY_NAME>"; without a ``next`` it lands on the start page."""

    def get_default_redirect_url(self) -> str:
        return start_page(self.request.user)

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["local_login"] = settings.AGENTWEB_LOCAL_LOGIN
        if oidc.enabled():
            context["sso"] = {"name": oidc.display_name(), "unavailable": ""}
            try:
                oidc.issuer()
            except oidc.Unavailable as exc:
                context["sso"]["unavailable"] = str(exc)
        return context

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not settings.AGENTWEB_LOCAL_LOGIN:
            context = self.get_context_data(form=self.get_form())
            context["refused"] = "Password sign-in is switched off here."
            return self.render_to_response(context, status=403)
        return super().post(request, *args, **kwargs)


class SignInView(OIDCAuthenticationRequestView):
    """``/oidc/login/``: off to the issuer's authorization endpoint (the library adds
    state, nonce and the PKCE challenge); back to the login page when it cannot be reached."""

    def __init__(self, **kwargs: Any) -> None:
        # The library reads a fixed authorization endpoint from settings here; ours comes
        # from discovery, per request (the issuer may have been down at start).
        View.__init__(self, **kwargs)
        self.OIDC_RP_CLIENT_ID = settings.OIDC_CLIENT_ID
        self.OIDC_OP_AUTH_ENDPOINT = ""
        self.scope = ""

    def get(self, request: HttpRequest) -> HttpResponse:
        if not oidc.enabled():
            raise Http404("company sign-in is not configured")
        try:
            found = oidc.issuer(retry=True)  # a person asked: try again now
        except oidc.Unavailable:
            login = reverse("login")
            nxt = request.GET.get("next")
            return redirect(f"{login}?{urlencode({'next': nxt})}" if nxt else login)
        self.OIDC_OP_AUTH_ENDPOINT = found.authorization_endpoint
        self.scope = found.scope
        response: HttpResponse = super().get(request)
        return response

    def get_extra_params(self, request: HttpRequest) -> dict[str, str]:
        return {"scope": self.scope}


class CallbackView(OIDCAuthenticationCallbackView):
    """``/oidc/callback/``: the library checks the state and signs the person in; every
    refusal gets a page saying what failed (state, nonce, signature, audience, a used
    code, an error from the issuer), and is logged."""

    def get(self, request: HttpRequest) -> HttpResponse:
        if not oidc.enabled():
            raise Http404("company sign-in is not configured")
        iss = request.GET.get("iss")
        if iss:  # RFC 9207: the answer names who sent it; another issuer is a mix-up
            try:
                expected = oidc.issuer().issuer
            except oidc.Unavailable as exc:
                return self.refused(oidc.Refused("unavailable", str(exc), 502))
            if iss != expected:
                return self.refused(
                    oidc.Refused(
                        "issuer", f"the answer came from another issuer ({iss!r}, not {expected!r})"
                    )
                )
        try:
            response: HttpResponse = super().get(request)
        except oidc.Refused as exc:
            return self.refused(exc)
        except SuspiciousOperation:  # the library: a state this session never handed out
            return self.refused(oidc.Refused("state", _STATE))
        return response

    @property
    def success_url(self) -> str:
        return self.request.session.get("oidc_login_next") or start_page(self.user)

    def login_failure(self) -> HttpResponse:
        query, user = self.request.GET, getattr(self, "user", None)
        if query.get("error"):
            said = query["error"][:100]
            if query.get("error_description"):
                said += f": {query['error_description'][:300]}"
            return self.refused(
                oidc.Refused("idp", f"{oidc.display_name()} did not sign you in ({said})")
            )
        if not query.get("code") or not query.get("state"):
            return self.refused(
                oidc.Refused("callback", "this address was opened without an authorization code")
            )
        if user is not None and not user.is_active:
            return self.refused(oidc.Refused("account", "your agentweb account is switched off"))
        if "oidc_states" not in self.request.session:
            return self.refused(oidc.Refused("state", _STATE))
        return self.refused(oidc.Refused("account", "no agentweb account could be signed in"))

    def refused(self, exc: oidc.Refused) -> HttpResponse:
        log.warning("sign-in with %s refused (%s): %s", oidc.display_name(), exc.what, exc)
        return render(
            self.request,
            "registration/signin_refused.html",
            {"what": exc.what, "message": str(exc), "sso_name": oidc.display_name()},
            status=exc.status,
        )


_STATE = (
    "this answer does not belong to a sign-in started in this browser (its state is "
    "unknown, or was already used): start again"
)


class LogoutView(OIDCLogoutView):
    """Log out (POST): the session ends here and, for a company sign-in, at the issuer
    too (``oidc.logout_url``), which sends the browser back to the login page."""

    @property
    def redirect_url(self) -> str:
        return str(settings.LOGOUT_REDIRECT_URL)
