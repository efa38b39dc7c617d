from django.urls import path

from agentweb.accounts import views

app_name = "accounts"

urlpatterns = [
    path("tokens/", views.tokens, name="tokens"),
    path("tokens/<int:token_id>/revoke/", views.revoke, name="revoke"),
]
