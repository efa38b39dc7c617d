from django.urls import path

from agentweb.notify import views

app_name = "notify"

urlpatterns = [
    path("approvals/<int:approval_id>/", views.approval_page, name="approval"),
    path("hooks/slack/interactions", views.slack_interactions, name="slack_interactions"),
]
