from django.contrib import admin
from django.urls import include, path

from agentweb.accounts.views import CallbackView, LoginView, LogoutView, SignInView
from agentweb.budgets.views import spend_page
from agentweb.health import healthz
from agentweb.observability.views import metrics_view

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics_view, name="metrics"),
    path("admin/", admin.site.urls),
    path("accounts/login/", LoginView.as_view(), name="login"),
    path("accounts/logout/", LogoutView.as_view(), name="logout"),
    # Company sign-in (OIDC_ISSUER); 404 when it is not configured. The names are the ones
    # mozilla-django-oidc reverses.
    path("oidc/login/", SignInView.as_view(), name="oidc_authentication_init"),
    path("oidc/callback/", CallbackView.as_view(), name="oidc_authentication_callback"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("account/", include("agentweb.accounts.urls")),
    path("spend/", spend_page, name="spend"),
    path("api/", include("agentweb.tickets.api_urls")),
    path("api/", include("agentweb.budgets.api_urls")),
    path("hooks/", include("agentweb.tickets.hook_urls")),
    path("api/", include("agentweb.mcpservers.api_urls")),
    path("api/", include("agentweb.runs.api_urls")),
    path("", include("agentweb.notify.urls")),
    path("", include("agentweb.web.urls")),
]

handler400 = "agentweb.web.errors.bad_request"
handler403 = "agentweb.web.errors.permission_denied"
handler404 = "agentweb.web.errors.page_not_found"
handler500 = "agentweb.web.errors.server_error"
