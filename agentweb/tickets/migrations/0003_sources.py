# Webhook sources and the deliveries they made (DESIGN §11).

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tickets', '0002_from_shop'),
    ]

    operations = [
        migrations.CreateModel(
            name='Source',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=64, unique=True)),
                ('kind', models.CharField(choices=[('generic', "Generic (agentweb's JSON, X-Agentweb-Signature)"), ('zendesk', 'Zendesk (its trigger payload and webhook signature)')], default='generic', max_length=10)),
                ('secret', models.CharField(help_text='Shown once when set; signs both ways', max_length=200)),
                ('reply_url', models.URLField(blank=True, max_length=500)),
                ('enabled', models.BooleanField(default=True)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
            ],
            options={
                'ordering': ['name'],
            },
        ),
        migrations.CreateModel(
            name='WebhookDelivery',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('delivery_id', models.CharField(max_length=200)),
                ('event', models.CharField(max_length=40)),
                ('received_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('source', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='deliveries', to='tickets.source')),
                ('ticket', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='tickets.ticket')),
            ],
            options={
                'ordering': ['-received_at', '-id'],
                'constraints': [models.UniqueConstraint(fields=('source', 'delivery_id'), name='tickets_delivery_id_unique')],
            },
        ),
    ]
