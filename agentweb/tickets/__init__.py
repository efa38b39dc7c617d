"""Tickets: agentweb's own record of a customer conversation (DESIGN §11).

A ticket comes from a source (``api``, ``email``, a webhook source by its name, or the
seeded ``demo`` tickets), carries a thread of incoming and outgoing messages and free
``fields`` a source maps in (the demo tickets: ``customer_id``, ``order_id``). Domains read
those fields; nothing here knows the demo shop.
"""
