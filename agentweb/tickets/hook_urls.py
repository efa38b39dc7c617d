from django.urls import path

from agentweb.tickets import hooks

urlpatterns = [
    path("tickets/<str:source_name>", hooks.ticket_hook, name="hook-tickets"),
]
