# How a reply agentweb wrote is delivered (DESIGN §11).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tickets', '0006_intake_rules'),
    ]

    operations = [
        migrations.AddField(
            model_name='message',
            name='delivery_id',
            field=models.CharField(blank=True, max_length=100),
        ),
        migrations.AddField(
            model_name='message',
            name='undelivered',
            field=models.CharField(blank=True, max_length=500),
        ),
    ]
