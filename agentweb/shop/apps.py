from django.apps import AppConfig


class ShopConfig(AppConfig):
    name = "agentweb.shop"
    label = "shop"
    verbose_name = "Demo shop"
    default_auto_field = "django.db.models.BigAutoField"
