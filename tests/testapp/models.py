"""A handler's effect that can only happen once per message: the unique constraint on
message_id makes a second hand-over of the same message fail loudly instead of counting twice."""

from django.db import models


class Receipt(models.Model):
    message_id = models.CharField(max_length=64, unique=True)
    payload = models.JSONField()
    received_at = models.DateTimeField(auto_now_add=True)


class HandlerCall(models.Model):
    """Every run of a handler task, duplicates included (no unique constraint): the difference
    from Receipt counts how often a message reached its handler more than once."""

    message_id = models.CharField(max_length=64, db_index=True)
    called_at = models.DateTimeField(auto_now_add=True)
