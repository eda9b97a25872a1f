"""Which cascade new endpoints use is the setting DELAY_DEFAULT_VERSION, not a flag on a row."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0006_accuracy_reports'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='topologyversion',
            name='one_default_version',
        ),
        migrations.RemoveField(
            model_name='topologyversion',
            name='is_default',
        ),
    ]
