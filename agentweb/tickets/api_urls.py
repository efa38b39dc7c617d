from django.urls import path

from agentweb.tickets import api

urlpatterns = [
    path("tickets", api.tickets, name="api-tickets"),
    path("tickets/<int:ticket_id>", api.ticket_detail, name="api-ticket"),
    path("tickets/<int:ticket_id>/messages", api.ticket_messages, name="api-ticket-messages"),
]
