"""``budget_teams_of_run(run)``: the teams a top run's spend counts toward, as
``budgets.ledger.owners`` finds them (its starter's teams when it has no ticket, else the
teams owning its ticket's queue, none when that queue is empty), for the worker's claim
of the run to read them in the same round trip. PL/pgSQL: PostgreSQL keeps the plans of
its statements per session, where the same query sent as SQL was planned at every claim.
tests/runs/test_budgets.py checks it against ``owners``' own queries.
"""

from django.db import migrations

TEAMS_OF_RUN = r"""
CREATE OR REPLACE FUNCTION budget_teams_of_run(run bigint)
RETURNS TABLE (team_id bigint, team_name varchar, team_limit numeric)
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
    RETURN QUERY
        SELECT t.id, t.name, t.daily_cost_usd
        FROM runs_run r
        JOIN teams_team_members m ON m.user_id = r.created_by_id
        JOIN teams_team t ON t.id = m.team_id
        WHERE r.id = run AND r.ticket_id IS NULL
        UNION
        SELECT t.id, t.name, t.daily_cost_usd
        FROM runs_run r
        JOIN tickets_ticket k ON k.id = r.ticket_id
        JOIN teams_team t ON t.queues @> ARRAY[k.queue]
        WHERE r.id = run AND k.queue <> '';
END
$fn$
"""


class Migration(migrations.Migration):
    dependencies = [
        ("budgets", "0001_initial"),
        ("runs", "0015_cheaper_step_writes"),
        ("teams", "0002_admins_see_all_teams"),
        ("tickets", "0007_reply_delivery"),
    ]

    operations = [
        migrations.RunSQL(TEAMS_OF_RUN, "DROP FUNCTION IF EXISTS budget_teams_of_run(bigint)"),
    ]
