"""Tool modules loaded by agentweb (``AGENTWEB_TOOLS``); ``tools.ticket`` is the bundled set."""
