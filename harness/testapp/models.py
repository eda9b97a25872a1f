"""What test handlers leave behind: one Receipt per run of a handler, duplicates included.

There is deliberately no unique constraint on message_id: a second run of the same message must
show as a second row that tests count, not hide as an IntegrityError inside the worker."""

from django.db import models


class Receipt(models.Model):
    message_id = models.CharField(max_length=64, db_index=True)
    payload = models.JSONField()
    received_at = models.DateTimeField(auto_now_add=True)
