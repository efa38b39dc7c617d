"""Budgets (DESIGN §15): what a run, a profile and a team may spend on model calls.

- ``models.DailySpend``: the ledger, one row per day (the installation's ``TIME_ZONE``
  day), per profile and per team; the engine adds each stored step's model calls to it in
  the step's own transaction (``ledger.record``), so a rolled-back step costs nothing.
- ``check.budget_check(run)``: the runtime's ``Agent(budget=...)`` hook, asked before
  every model call: the profile's ``max_cost_usd_per_run`` / ``max_tokens_per_run``
  against the run with its sub-runs (children count toward their top run), the
  profiles' and the teams' ``daily_cost_usd`` against today's ledger.
- ``views``: spend per team and per profile, for admins (``/spend/``, ``GET /api/spend``).
"""
