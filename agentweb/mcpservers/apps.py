from django.apps import AppConfig


class McpServersConfig(AppConfig):
    """MCP servers (DESIGN §13): their tools join the registry of every process, and
    what a contact finds is recorded on the server's row."""

    name = "agentweb.mcpservers"
    label = "mcpservers"
    verbose_name = "MCP servers"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported here: the models must be loaded first.
        from agentweb.mcpservers.actions import do_record_status
        from agentweb.mcpservers.source import SOURCE
        from agentweb.runs.agents import tool_sources
        from agentweb.runtime.mcpserver import set_listener

        tool_sources.add(SOURCE)
        set_listener(do_record_status)
