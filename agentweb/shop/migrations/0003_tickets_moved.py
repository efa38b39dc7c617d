"""Tickets and replies moved to agentweb.tickets (its migration 0002 copied them)."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('shop', '0002_shop_domain'),
        ('tickets', '0002_from_shop'),
        ('runs', '0009_alter_run_ticket'),  # runs point at the new tickets first
    ]

    operations = [
        migrations.RemoveField(
            model_name='ticket',
            name='customer',
        ),
        migrations.RemoveField(
            model_name='ticket',
            name='order',
        ),
        migrations.DeleteModel(
            name='CustomerReply',
        ),
        migrations.DeleteModel(
            name='Ticket',
        ),
    ]
