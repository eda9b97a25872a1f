"""Drop the single-column indexes on a message's endpoint and version: (endpoint, status) serves
endpoint lookups, and each index is written again at every status change of a message."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0008_v3_direct_cascade'),
    ]

    operations = [
        migrations.AlterField(
            model_name='scheduledmessage',
            name='endpoint',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='messages', to='scheduling.endpoint'),
        ),
        migrations.AlterField(
            model_name='scheduledmessage',
            name='topology',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='messages', to='scheduling.topologyversion'),
        ),
    ]
