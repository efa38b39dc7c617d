# Tickets are agentweb's own (DESIGN §11).

import django.contrib.postgres.fields
import django.contrib.postgres.indexes
import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('runs', '0008_sum_per_keys'),
    ]

    operations = [
        migrations.CreateModel(
            name='Ticket',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('source', models.CharField(default='api', max_length=64)),
                ('external_id', models.CharField(blank=True, max_length=500)),
                ('subject', models.CharField(max_length=500)),
                ('requester_email', models.CharField(blank=True, max_length=320)),
                ('requester_name', models.CharField(blank=True, max_length=200)),
                ('status', models.CharField(choices=[('open', 'Open'), ('pending', 'Pending'), ('solved', 'Solved'), ('closed', 'Closed')], default='open', max_length=10)),
                ('queue', models.CharField(blank=True, db_index=True, max_length=100)),
                ('tags', django.contrib.postgres.fields.ArrayField(base_field=models.CharField(max_length=100), blank=True, default=list, size=None)),
                ('fields', models.JSONField(blank=True, default=dict)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('updated_at', models.DateTimeField(default=django.utils.timezone.now)),
            ],
            options={
                'ordering': ['-updated_at', '-id'],
                'indexes': [models.Index(fields=['status', '-updated_at'], name='tickets_status_updated'), models.Index(fields=['source', '-updated_at'], name='tickets_source_updated'), django.contrib.postgres.indexes.GinIndex(fields=['tags'], name='tickets_tags_gin'), django.contrib.postgres.indexes.GinIndex(fields=['fields'], name='tickets_fields_gin', opclasses=['jsonb_path_ops'])],
                'constraints': [models.UniqueConstraint(condition=models.Q(('external_id', ''), _negated=True), fields=('source', 'external_id'), name='tickets_source_external_id_unique')],
            },
        ),
        migrations.CreateModel(
            name='Message',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('direction', models.CharField(choices=[('in', 'Incoming'), ('out', 'Outgoing')], default='in', max_length=3)),
                ('author', models.CharField(blank=True, max_length=320)),
                ('body', models.TextField()),
                ('quoted', models.TextField(blank=True)),
                ('external_id', models.CharField(blank=True, max_length=998)),
                ('attachments', models.JSONField(blank=True, default=list)),
                ('at', models.DateTimeField(default=django.utils.timezone.now)),
                ('key', models.CharField(blank=True, max_length=200, null=True, unique=True)),
                ('run', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='runs.run')),
                ('ticket', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='messages', to='tickets.ticket')),
            ],
            options={
                'ordering': ['at', 'id'],
                'indexes': [models.Index(fields=['ticket', 'at'], name='tickets_message_thread')],
                'constraints': [models.UniqueConstraint(condition=models.Q(('external_id', ''), _negated=True), fields=('ticket', 'external_id'), name='tickets_message_external_id_unique')],
            },
        ),
    ]
