"""agentweb: run AI agents on customer tickets with a human in the loop."""
