from django.db import migrations

SQL = """
CREATE OR REPLACE FUNCTION runs_auditentry_append_only() RETURNS trigger AS $$
BEGIN
  RAISE EXCEPTION 'runs_auditentry is append-only (% refused)', TG_OP;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER runs_auditentry_no_change
  BEFORE UPDATE OR DELETE ON runs_auditentry
  FOR EACH ROW EXECUTE FUNCTION runs_auditentry_append_only();
"""

REVERSE = """
DROP TRIGGER IF EXISTS runs_auditentry_no_change ON runs_auditentry;
DROP FUNCTION IF EXISTS runs_auditentry_append_only();
"""


class Migration(migrations.Migration):
    dependencies = [("runs", "0001_initial")]
    operations = [migrations.RunSQL(SQL, REVERSE)]
