"""Indexes for sum_per totals (``policies.prior_total``): the rows of one tool whose
``sum_per`` argument names one group (an order), without reading all of the tool's rows.

``runs_group_keys(arguments)`` maps each top-level argument to its value as
``agentweb.runtime.approvals.group_key`` writes it, where SQL can do exactly that (a
string of at most 200 ASCII characters: Python's whitespace trimmed, A-Z lowered), and to
``"*"`` otherwise. The indexes are built concurrently: an installation with many rows
keeps recording calls meanwhile.
"""

import django.contrib.postgres.indexes
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models

import agentweb.runs.models

GROUP_KEYS = r"""
CREATE OR REPLACE FUNCTION runs_group_keys(args jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
    SELECT coalesce(jsonb_object_agg(e.key, CASE
        WHEN jsonb_typeof(e.value) = 'string'
            AND char_length(e.value #>> '{}') <= 200
            AND (e.value #>> '{}') !~ '[^\x01-\x7f]'
        THEN to_jsonb(translate(
            btrim(e.value #>> '{}', E' \t\n\x0b\x0c\r\x1c\x1d\x1e\x1f'),
            'ABCDEFGHIJKLMNOPQRSTUVWXYZ',
            'abcdefghijklmnopqrstuvwxyz'
        ))
        ELSE '"*"'::jsonb
    END), '{}'::jsonb)
    FROM jsonb_each(CASE WHEN jsonb_typeof(args) = 'object' THEN args ELSE '{}'::jsonb END) AS e
$fn$
"""


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY

    dependencies = [
        ("runs", "0007_run_images"),
    ]

    operations = [
        migrations.RunSQL(GROUP_KEYS, "DROP FUNCTION IF EXISTS runs_group_keys(jsonb)"),
        AddIndexConcurrently(
            model_name="toolexecution",
            index=django.contrib.postgres.indexes.GinIndex(
                django.contrib.postgres.indexes.OpClass(
                    agentweb.runs.models.GroupKeys("arguments"), name="jsonb_path_ops"
                ),
                name="toolexecution_group_keys",
            ),
        ),
        AddIndexConcurrently(
            model_name="approval",
            index=django.contrib.postgres.indexes.GinIndex(
                django.contrib.postgres.indexes.OpClass(
                    agentweb.runs.models.GroupKeys("arguments"), name="jsonb_path_ops"
                ),
                condition=models.Q(("status__in", ["pending", "approved"])),
                name="approval_arguments_keys",
            ),
        ),
        AddIndexConcurrently(
            model_name="approval",
            index=django.contrib.postgres.indexes.GinIndex(
                django.contrib.postgres.indexes.OpClass(
                    agentweb.runs.models.GroupKeys("edited_arguments"), name="jsonb_path_ops"
                ),
                condition=models.Q(("status__in", ["pending", "approved"])),
                name="approval_edited_arguments_keys",
            ),
        ),
    ]
