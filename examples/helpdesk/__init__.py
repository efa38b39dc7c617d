"""An IT helpdesk domain for agentweb, written only against the public integration
surface: ``agentweb.runtime``'s ``@tool``, ``ToolError``, ``ToolContext`` and
``ContextHints``, a profile file for ``manage.py agents import``, and a scripted model
for ``AGENTWEB_MODEL=demo``. Point ``AGENTWEB_TOOLS=examples.helpdesk.tools`` at it.
See ``docs/integrate.md``."""
