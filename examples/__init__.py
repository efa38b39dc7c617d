"""Example domains built only on agentweb's public integration surface."""
