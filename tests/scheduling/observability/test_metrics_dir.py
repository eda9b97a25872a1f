"""The multiprocess directory of a server instance: emptied when it starts, never shared with
another running instance, removed on exit when it was made here."""

import os

from scheduling.observability import metrics_dir


def test_a_given_directory_is_emptied_of_an_earlier_runs_files(tmp_path):
    (tmp_path / "counter_4242.db").write_bytes(b"old counts")
    (tmp_path / "gauge_livesum_4243.db").write_bytes(b"old gauge")
    (tmp_path / f"counter_{os.getpid()}.db").write_bytes(b"this process counted already: kept")
    (tmp_path / "notes.txt").write_text("not ours")
    path, made = metrics_dir.prepare(str(tmp_path), prefix="dp-test-")
    try:
        assert (path, made) == (str(tmp_path), False)
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
            [metrics_dir.LOCK_NAME, f"counter_{os.getpid()}.db", "notes.txt"])
    finally:
        os.close(metrics_dir._locks.pop(str(tmp_path)))


def test_a_directory_another_running_instance_holds_is_not_shared(tmp_path):
    (tmp_path / "counter_1.db").write_bytes(b"the other instance's counts")
    assert metrics_dir._lock(tmp_path)  # the other instance (a lock on another open file: it conflicts)
    held = metrics_dir._locks.pop(str(tmp_path))
    try:
        path, made = metrics_dir.prepare(str(tmp_path), prefix="dp-test-")
        assert made and path != str(tmp_path) and os.path.isdir(path)
        assert (tmp_path / "counter_1.db").exists(), "the other instance's files were removed"
        metrics_dir.remove(path)
        assert not os.path.exists(path)
    finally:
        os.close(held)


def test_without_a_directory_one_is_made_and_named_in_the_environment():
    assert metrics_dir.ENV not in os.environ
    path, made = metrics_dir.set_up(prefix="dp-test-")
    try:
        assert made and os.environ[metrics_dir.ENV] == path and os.path.basename(path).startswith("dp-test-")
    finally:
        del os.environ[metrics_dir.ENV]  # this test process counts alone
        metrics_dir.remove(path)
