"""schedules/services.py's overlap: the runs of a skip or buffer_one schedule share the platform's
ordering key and carry the policy; allow runs get neither; a change of the policy remakes the runs
to come; a wrong value is a field error."""

import pytest
from django.core.exceptions import ValidationError

from scheduling.core.errors import BulkValidationError
from scheduling.messages.services import message_schedule_many
from scheduling.models import ScheduledMessage
from tests.scheduling.schedules.conftest import upsert

pytestmark = pytest.mark.django_db


def open_runs():
    return list(ScheduledMessage.objects.filter(schedule="poll", status__in=["pending", "published"])
                .values_list("ordering_key", "overlap"))


def test_skip_and_buffer_one_runs_share_the_schedules_key_allow_runs_have_none(endpoint):
    schedule, _ = upsert(endpoint)
    assert schedule.overlap == "allow" and set(open_runs()) == {(None, None)}
    schedule, _ = upsert(endpoint, overlap="skip")  # a new revision: the runs to come made again with the key
    assert schedule.revision == 2 and set(open_runs()) == {("schedule:poll", "skip")}
    schedule, _ = upsert(endpoint, overlap="buffer_one")
    assert set(open_runs()) == {("schedule:poll", "buffer_one")}
    assert ScheduledMessage.objects.filter(schedule="poll", status="cancelled").exists()


@pytest.mark.parametrize("value", ["sometimes", "", ["skip"], None])
def test_a_wrong_overlap_is_a_field_error(endpoint, value):
    with pytest.raises(ValidationError) as caught:
        upsert(endpoint, overlap=value)
    assert "must be one of allow, skip, buffer_one" in caught.value.message_dict["overlap"][0]


def test_a_caller_may_not_use_the_schedules_key(endpoint):
    with pytest.raises(BulkValidationError) as caught:
        message_schedule_many(items=[{"endpoint": endpoint.name, "payload": {}, "delay": 5,
                                      "ordering_key": "schedule:poll"}])
    assert "are the platform's" in caught.value.errors[0]["ordering_key"][0]
