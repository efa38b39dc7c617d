"""Runs carry their OpenTelemetry trace context; existing runs get ids of their own."""

from django.db import migrations, models

import agentweb.observability.ids

FILL = """
UPDATE runs_run SET
  trace_id = md5(random()::text || id::text),
  trace_span_id = left(md5(random()::text || id::text || 's'), 16)
"""


class Migration(migrations.Migration):
    dependencies = [("runs", "0003_approval_cancelled")]

    operations = [
        migrations.AddField(
            model_name="run",
            name="trace_id",
            field=models.CharField(default="", editable=False, max_length=32),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="run",
            name="trace_span_id",
            field=models.CharField(default="", editable=False, max_length=16),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="run",
            name="trace_parent_span_id",
            field=models.CharField(blank=True, editable=False, max_length=16),
        ),
        migrations.RunSQL(FILL, migrations.RunSQL.noop),
        migrations.AlterField(
            model_name="run",
            name="trace_id",
            field=models.CharField(
                default=agentweb.observability.ids.new_trace_id, editable=False, max_length=32
            ),
        ),
        migrations.AlterField(
            model_name="run",
            name="trace_span_id",
            field=models.CharField(
                default=agentweb.observability.ids.new_span_id, editable=False, max_length=16
            ),
        ),
    ]
