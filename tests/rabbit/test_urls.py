"""Reading broker URLs: vhost, management address, a URL fit to show a user."""

import pytest

from rabbit.urls import describe, management_url_for, node_for, node_urls, rotated, vhost_of, with_credentials


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


CLUSTER = "amqp://u:pw@a.example:5672/v;amqp://u:pw@b.example:5673/v; amqp://u:pw@c.example/v"


def test_a_failover_url_lists_its_nodes_in_order():
    assert node_urls(CLUSTER) == ["amqp://u:pw@a.example:5672/v", "amqp://u:pw@b.example:5673/v",
                                  "amqp://u:pw@c.example/v"]
    assert rotated(node_urls(CLUSTER), 4)[0] == "amqp://u:pw@b.example:5673/v"


def test_a_cluster_url_names_one_vhost_and_a_management_url_per_node():
    assert vhost_of(CLUSTER) == "v"
    assert management_url_for(CLUSTER) == ("http://u:pw@a.example:15672;http://u:pw@b.example:15672;"
                                           "http://u:pw@c.example:15672")
    assert describe(CLUSTER).count("**") == 3 and "pw" not in describe(CLUSTER)
    with pytest.raises(ValueError, match="different vhosts"):
        vhost_of("amqp://a/x;amqp://b/y")


def test_a_queue_name_always_places_on_the_same_node():
    assert node_for("billing", 3) == node_for("billing", 3) in (0, 1, 2)
    assert len({node_for(f"ep-{i}", 3) for i in range(30)}) == 3


def test_with_credentials_keeps_every_node_and_the_vhost_and_quotes_the_user():
    url = "amqp://guest:guest@a:5672/dp%2Fprod;amqp://guest:guest@b/dp%2Fprod;amqps://guest:guest@[::1]:5671/dp%2Fprod"
    made = with_credentials(url, "dp-team.shop", "p/w:@x")
    assert made == ("amqp://dp-team.shop:p%2Fw%3A%40x@a:5672/dp%2Fprod;amqp://dp-team.shop:p%2Fw%3A%40x@b/dp%2Fprod;"
                    "amqps://dp-team.shop:p%2Fw%3A%40x@[::1]:5671/dp%2Fprod")
    assert vhost_of(made) == "dp/prod" and "guest" not in made
