"""Re-sealing every endpoint's webhook secrets with the first key of DELAY_SECRETS_KEYS: the middle
step of a key rotation (docs/security.md#webhook-secrets-at-rest), and the sealing of rows a
process older than migration 0020 wrote in clear."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.db import transaction

from scheduling.models import Endpoint
from scheduling.security import secret_box

FIELDS = ("webhook_secret", "webhook_secret_previous")


@dataclass
class Resealed:
    total: int = 0  # endpoints looked at
    done: int = 0
    resealed: int = 0  # endpoints with a value sealed anew


def endpoint_reseal_secrets(*, batch_size: int = 500,
                            progress: Callable[[Resealed], None] | None = None) -> Resealed:
    """Each batch in a transaction of its own, its rows locked (a rotation meanwhile waits, and
    is not undone). A value already sealed with the first key is left as it is, so a second run
    changes nothing, and a run stopped half-way (a value no key opens:
    secret_box.SealedWithUnknownKey) can simply be run again."""
    result = Resealed(total=Endpoint.objects.count())
    last_pk = 0
    while True:
        with transaction.atomic():
            rows = list(Endpoint.objects.select_for_update().filter(pk__gt=last_pk).order_by("pk")
                        .only("pk", "name", *FIELDS)[:batch_size])
            if not rows:
                break
            changed = [row for row in rows if _reseal(row)]
            Endpoint.objects.bulk_update(changed, FIELDS)
        last_pk = rows[-1].pk
        result.done += len(rows)
        result.resealed += len(changed)
        if progress:
            progress(result)
    return result


def _reseal(row: Endpoint) -> bool:
    """Seal the row's stale values with the first key; whether there were any."""
    stale = [field for field in FIELDS if not secret_box.is_sealed_with_first_key(getattr(row, field))]
    for field in stale:
        try:
            setattr(row, field, secret_box.reseal(getattr(row, field)))
        except secret_box.SealedWithUnknownKey as exc:
            raise secret_box.SealedWithUnknownKey(f"endpoint {row.name!r} (id {row.pk}), {field}: {exc}") from None
    return bool(stale)
