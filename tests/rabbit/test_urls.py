"""Reading broker URLs: vhost, management address, a URL fit to show a user."""

import pytest

from rabbit.urls import describe, management_url_for, vhost_of


@pytest.mark.parametrize(("url", "vhost"), [
    ("amqp://guest:guest@127.0.0.1:5672//", "/"), ("amqp://h:5672/", "/"), ("amqp://h:5672", "/"),
    ("amqp://h/dp-test-1", "dp-test-1"), ("amqp://h/a%2Fb", "a/b"), ("amqp://h/a%2fb", "a/b"),
])
def test_vhost_of(url, vhost):
    assert vhost_of(url) == vhost


@pytest.mark.parametrize(("url", "management"), [
    ("amqp://u:p@mq.example:5673/v", "http://u:p@mq.example:15672"),
    ("amqp://mq.example", "http://guest:guest@mq.example:15672"),
    ("amqp://", "http://guest:guest@127.0.0.1:15672"),
])
def test_management_url_for(url, management):
    assert management_url_for(url) == management


def test_describe_hides_the_password():
    assert describe("amqp://user:secret@mq.example:5672/v") == "amqp://user:**@mq.example:5672/v"
