"""Stopping by PID stops the whole process group, also what outlives its launcher."""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path

from shardline.infra import procs


def test_stop_waits_for_and_kills_group_members_that_outlive_the_leader(tmp_path: Path) -> None:
    # Like spark-daemon.sh and its JVM: the leader exits at once, its child (ignoring
    # SIGTERM) stays in the group. Stopping the leader's PID must not leave it behind.
    proc = procs.start(["sh", "-c", "(trap '' TERM; exec sleep 60) & exit 0"],
                       tmp_path / "log")
    proc.wait(5)
    time.sleep(0.2)
    members = procs.group_members(proc.pid)
    assert members and proc.pid not in members
    assert procs.stop(proc.pid, grace_s=1.0) is False  # needed SIGKILL
    assert procs.group_members(proc.pid) == []


def test_stop_on_polite_signal(tmp_path: Path) -> None:
    proc = procs.start(["sleep", "60"], tmp_path / "log")
    ticks = procs.start_ticks(proc.pid)
    assert ticks is not None and procs.alive(proc.pid)
    assert procs.stop(proc.pid, first=signal.SIGINT, grace_s=5.0) is True
    assert not procs.alive(proc.pid) and procs.start_ticks(proc.pid) is None
    assert procs.stop(proc.pid) is True  # already gone: nothing to do
    assert "start: sleep 60" in (tmp_path / "log").read_text()


def test_port_free_sees_a_listener() -> None:
    port = procs.free_port()
    assert procs.port_free(port)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        assert not procs.port_free(port) and procs.port_in_use(port)
