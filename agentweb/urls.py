from django.contrib import admin
from django.urls import include, path

from agentweb.accounts.views import LoginView
from agentweb.health import healthz
from agentweb.observability.views import metrics_view

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics_view, name="metrics"),
    path("admin/", admin.site.urls),
    path("accounts/login/", LoginView.as_view(), name="login"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("account/", include("agentweb.accounts.urls")),
    path("api/", include("agentweb.tickets.api_urls")),
    path("api/", include("agentweb.runs.api_urls")),
    path("", include("agentweb.web.urls")),
]

handler400 = "agentweb.web.errors.bad_request"
handler403 = "agentweb.web.errors.permission_denied"
handler404 = "agentweb.web.errors.page_not_found"
handler500 = "agentweb.web.errors.server_error"
