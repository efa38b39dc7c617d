from django.contrib import admin
from django.urls import include, path

from agentweb.health import healthz

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/", include("agentweb.runs.api_urls")),
    path("", include("agentweb.web.urls")),
]
