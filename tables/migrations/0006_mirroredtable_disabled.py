from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tables", "0005_mirror_doctor_facts"),
    ]

    operations = [
        migrations.AddField(
            model_name="mirroredtable",
            name="disabled",
            field=models.BooleanField(default=False),
        ),
    ]
