# Run.ticket points at agentweb.tickets (same ids: tickets 0002 kept them).

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0008_sum_per_keys'),
        ('tickets', '0002_from_shop'),
    ]

    operations = [
        migrations.AlterField(
            model_name='run',
            name='ticket',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='runs', to='tickets.ticket'),
        ),
    ]
