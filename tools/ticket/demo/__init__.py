"""The ``demo`` model of the ticket domain: an offline, deterministic stand-in for a real
model that plays the bundled ticket scenarios (one module per scenario) on the demo shop.
``AGENTWEB_MODEL=demo`` selects it through ``tools.ticket.demo_model``."""

from .model import SCENARIOS, DemoModel, scenario_for

__all__ = ["SCENARIOS", "DemoModel", "scenario_for"]
