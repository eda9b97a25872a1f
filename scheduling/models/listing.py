"""What a Parquet file of an archive is listed with (messages: ArchiveFile; the audit log:
AuditArchiveFile): a file on disk that its table does not list was left by a prune killed before
its commit, and the next prune removes it."""

from django.db import models
from django.utils import timezone

from scheduling.config.conf import setting_name


class ParquetFileListing(models.Model):
    path = models.CharField(max_length=255, unique=True, help_text=f"relative to {setting_name('archive_dir')}")
    rows = models.PositiveBigIntegerField()
    bytes = models.PositiveBigIntegerField()
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        abstract = True
        ordering = ["day", "path"]

    def __str__(self) -> str:
        return self.path
