from django.urls import path

from agentweb.budgets import views

urlpatterns = [path("spend", views.api_spend, name="api-spend")]
