from django.apps import AppConfig


class McpServersConfig(AppConfig):
    """MCP servers (DESIGN §13): their tools join the registry of every process, and
    what a contact finds is recorded on the server's row."""

    name = "agentweb.mcpservers"
    label = "mcpservers"
    verbose_name = "MCP servers"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Inside ready(): the wiring imports models, which need the apps loaded.
        from agentweb.mcpservers import wiring

        wiring.install()
