"""Times as the wire carries them: whole milliseconds since the Unix epoch, UTC."""

from datetime import datetime, timedelta, timezone

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
MS = timedelta(milliseconds=1)


def to_epoch_ms(moment: datetime) -> int:
    return (moment - EPOCH) // MS


def from_epoch_ms(ms: int) -> datetime:
    return EPOCH + ms * MS


def now_ms() -> int:
    return to_epoch_ms(datetime.now(timezone.utc))


def ceil_ms(moment: datetime) -> datetime:
    """``moment`` rounded up to a whole millisecond (a due time is never made earlier)."""
    extra = moment.microsecond % 1000
    return moment + timedelta(microseconds=1000 - extra) if extra else moment


def minute_floor(moment: datetime) -> datetime:
    """The start of the minute ``moment`` is in (the dashboard's figures are per minute)."""
    return moment.replace(second=0, microsecond=0)
