"""The outbox: every message agentweb sends to the outside world, delivered at least once.

One ``Delivery`` row per outgoing message (a mail, a signed webhook POST, a Slack post),
created in the caller's transaction with the exact bytes to send; sent after commit on a
worker, never inside a run's step; retried with backoff; its state kept for pages.

Queue (``agentweb.outbox.actions``, imported ``as outbox``), inside your own transaction::

    d = outbox.do_queue_email(
        to="Alice <alice@example.com>", subject="...", text="...", html=None,
        headers={"In-Reply-To": "<...>", "References": "<...>"},   # optional
        delivery_id="msg-41",             # optional; default a new uuid4
        about=("ticketmessage", 41),      # what it belongs to (for "what reached whom")
        topic="reply",                    # free label, shown in lists
        ordering_key="",                  # same key: sent in creation order
    )
    outbox.do_queue_webhook(url=..., secret=..., payload={"event": ..., "delivery_id": None})
    outbox.do_queue_slack(url=..., payload={"blocks": [...]}, to_label="Slack", ...)

- ``delivery_id`` is unique and stable: the mail's ``Message-ID`` is
  ``outbox.message_id(delivery_id)`` (``<id@domain of AGENTWEB_MAIL_FROM>``) and webhook
  POSTs carry it as ``X-Agentweb-Delivery`` (and in the JSON where the payload has
  ``"delivery_id": None``). Queueing an id that exists returns the existing row unchanged
  (idempotent; the first bytes win). Ids are 1-100 of ``A-Za-z0-9._-``.
- The body is built and stored when queued (``Date``, ``Message-ID`` included), so a
  retry or a re-send after a worker died mid-attempt sends byte-for-byte the same
  message. Receivers dedupe on the delivery id.
- ``BadDelivery`` (a ``ValueError``) for an unusable address, URL, id or payload.
- State: ``queued`` (waiting for an attempt or a retry; ``last_error`` says why the last
  one failed), ``sent``, ``failed`` (gave up). ``attempts``, ``next_attempt_at``,
  ``sent_at``. ``Delivery.as_notification()`` → ``{"channel", "to", "state", "error",
  "attempts", "topic", "delivery_id", "sent_at"}``; ``outbox.deliveries_about(type, id)``.
- ``outbox.on_change(about_type, hook)``: ``hook(delivery)`` runs after commit whenever
  a delivery about that type is queued or changes (to publish a page's update).

Sending: after commit a wake-up goes to a worker (through the broker, or directly when
already in a worker), which hands the id to the delivery's *lane* (one per SMTP server
or webhook host: a few threads of their own, ``agentweb.outbox.lanes``). The attempt
claims the row with a conditional UPDATE (queued, due, not held by another attempt, not
behind an earlier queued row of its ``ordering_key``), sends once, and records the
outcome. Errors and timeouts (``AGENTWEB_DELIVERY_TIMEOUT_SECONDS``, default 10) are
retried after 5 s, 10 s, 20 s ... (at most 30 min apart) until
``AGENTWEB_DELIVERY_RETRY_HOURS`` (default 24) have passed; a mail server's 5xx refusal
of the recipient or the message fails at once. Beat's sweep (every 2 s) tries what is
due, so a lost wake-up or a killed worker loses nothing. Rows of one ordering key go in
order: a later one waits while an earlier one is queued.

Channels (``agentweb.outbox.transports``): ``AGENTWEB_SMTP_URL`` (``smtp://user:pass@host:587``
with STARTTLS when offered, ``smtps://``, ``?tls=off`` for loopback tests only; ``From:``
``AGENTWEB_MAIL_FROM``); webhooks signed with ``agentweb.signing.agentweb_headers``; Slack
JSON unsigned. Certificates are checked against the system's CAs (``SSL_CERT_FILE``).
"""
