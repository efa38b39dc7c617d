# Email in: how far each mailbox was read, and every mail taken from it (DESIGN §11).

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tickets', '0003_sources'),
    ]

    operations = [
        migrations.CreateModel(
            name='Mailbox',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('key', models.CharField(max_length=500, unique=True)),
                ('uidvalidity', models.BigIntegerField(blank=True, null=True)),
                ('last_uid', models.BigIntegerField(default=0)),
                ('next_poll_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('lease_until', models.DateTimeField(blank=True, null=True)),
                ('last_ok_at', models.DateTimeField(blank=True, null=True)),
                ('last_error', models.TextField(blank=True)),
                ('last_error_at', models.DateTimeField(blank=True, null=True)),
                ('imported', models.PositiveIntegerField(default=0)),
            ],
        ),
        migrations.CreateModel(
            name='ImportedMail',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('uidvalidity', models.BigIntegerField()),
                ('uid', models.BigIntegerField()),
                ('message_id', models.CharField(max_length=998)),
                ('skipped', models.CharField(blank=True, max_length=100)),
                ('imported_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('became', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='tickets.message')),
                ('mailbox', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='mails', to='tickets.mailbox')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('mailbox', 'uidvalidity', 'uid'), name='tickets_mail_uid_unique'), models.UniqueConstraint(fields=('mailbox', 'message_id'), name='tickets_mail_message_id_unique')],
            },
        ),
    ]
