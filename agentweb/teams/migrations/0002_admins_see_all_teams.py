"""The admin role sees every team: an installation whose roles exist already (seed_demo or
company sign-in made them) gets the new permission on its admin group now."""

from django.contrib.auth.management import create_permissions
from django.db import migrations


def grant(apps, schema_editor):
    # Permissions are made after migrations run; make this app's now, to hand one out.
    config = apps.get_app_config("teams")
    config.models_module = True
    create_permissions(config, apps=apps, verbosity=0)
    config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    admin = Group.objects.filter(name="admin").first()
    if admin is not None:
        admin.permissions.add(
            Permission.objects.get(content_type__app_label="teams", codename="view_all_teams")
        )


class Migration(migrations.Migration):
    dependencies = [
        ("teams", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(grant, migrations.RunPython.noop)]
