"""The console's three roles as Django groups: viewer (read-only), operator (pause, resume, force
commit, re-ingest), admin (everything, also user management). See `console.roles`."""

from django.db import migrations

ROLES = ("viewer", "operator", "admin")


def create_groups(apps, schema_editor):
    group = apps.get_model("auth", "Group")
    for name in ROLES:
        group.objects.get_or_create(name=name)


class Migration(migrations.Migration):
    dependencies = [
        ("tables", "0002_mirror_and_audit"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [migrations.RunPython(create_groups, migrations.RunPython.noop)]
