"""The user's own API tokens: create (shown once), list, revoke."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from agentweb.accounts.models import ApiToken

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
    """Django's login form; without a ``next`` it lands on the person's start page."""

    def get_default_redirect_url(self) -> str:
        from agentweb.web.views import start_page

        return start_page(self.request.user)
