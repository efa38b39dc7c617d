# Rules that start runs, kept in /admin/ (DESIGN §11).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tickets', '0005_admin_names'),
    ]

    operations = [
        migrations.CreateModel(
            name='IntakeRule',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('queue', models.CharField(blank=True, help_text='Empty: any queue', max_length=100)),
                ('tag', models.CharField(blank=True, help_text='Empty: any tags', max_length=100)),
                ('agent', models.CharField(help_text="The agent profile's name", max_length=100)),
                ('mode', models.CharField(choices=[('auto', 'Start a run when a ticket arrives or the customer writes again'), ('suggest', 'Offer a start button on the ticket')], default='suggest', max_length=10)),
                ('enabled', models.BooleanField(default=True)),
                ('position', models.PositiveIntegerField(default=0, help_text='Lower first')),
            ],
            options={
                'ordering': ['position', 'id'],
            },
        ),
    ]
