from django.urls import path

from agentweb.tickets import api

urlpatterns = [
    path("tickets", api.tickets, name="api-tickets"),
]
