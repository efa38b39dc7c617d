from django.apps import AppConfig


class WebConfig(AppConfig):
    name = "agentweb.web"
    label = "web"
