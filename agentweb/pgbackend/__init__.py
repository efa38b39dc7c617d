"""Django's PostgreSQL backend, with the pool's borrow check of ``agentweb.pgcheck``."""
