"""The warm flow-run server (flows/warm.py): the client hands its run to a forked child of
the server and behaves like the cold ``python -m prefect.engine`` process it replaces (exit
code, output, working folder, environment, signals); without a server it runs cold.

A small module stands in for ``prefect.engine`` (the server's ``--engine``), so no Prefect
server is needed; the stack and bench tests run real flow runs through it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shardline.infra import procs

FAKE_ENGINE = '''
import os, sys, time
print("ENGINE", " ".join(sys.argv[1:]), os.environ.get("RUN_VALUE"), os.getcwd(),
      os.getpid(), os.getppid(), flush=True)
print("to stderr", file=sys.stderr, flush=True)
if os.environ.get("RUN_QUEUED"):
    # stands in for Prefect's events worker holding an event the run emitted last: it is
    # sent by drain_all (a cold process's exit hooks call it; os._exit skips them)
    import types
    mod = types.ModuleType("prefect.events.worker")
    class EventsWorker:
        @classmethod
        def drain_all(cls, timeout=None):
            open(os.environ["RUN_QUEUED"], "w").write(f"sent {timeout}")
    mod.EventsWorker = EventsWorker
    sys.modules["prefect.events.worker"] = mod
if os.environ.get("RUN_SLEEP"):
    open(os.environ["RUN_PIDFILE"], "w").write(str(os.getpid()))
    time.sleep(float(os.environ["RUN_SLEEP"]))
sys.exit(int(os.environ.get("RUN_CODE", "0")))
'''


# The server with os.fork failing on its first call, as the kernel refuses a fork at the
# process limit or out of memory (resource exhaustion cannot be produced safely here).
FIRST_FORK_FAILS = '''
import errno, os, sys
real_fork, calls = os.fork, []
def fork():
    calls.append(1)
    if len(calls) == 1:
        raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN))
    return real_fork()
os.fork = fork
from shardline.flows import warm
warm.main(sys.argv[1:])
'''


def start_server(tmp_path: Path, module: str) -> tuple[Path, subprocess.Popen[bytes]]:
    (tmp_path / "fake_engine.py").write_text(FAKE_ENGINE)
    (tmp_path / "first_fork_fails.py").write_text(FIRST_FORK_FAILS)
    sock = tmp_path / "w.sock"
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    proc = procs.start([sys.executable, "-m", module, "serve", "--socket",
                        str(sock), "--preload", "json", "--engine", "fake_engine"],
                       tmp_path / "warm.log", env=env)
    deadline = time.monotonic() + 60
    while not sock.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            procs.stop(proc.pid, first=signal.SIGTERM, grace_s=10)
            raise AssertionError((tmp_path / "warm.log").read_text())
        time.sleep(0.1)
    return sock, proc


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[bytes]]]:
    sock, proc = start_server(tmp_path, "shardline.flows.warm")
    try:
        yield sock, proc
    finally:
        procs.stop(proc.pid, first=signal.SIGTERM, grace_s=10)


def client(sock: Path | None, cwd: Path, **env: str) -> subprocess.Popen[str]:
    full = {k: v for k, v in os.environ.items() if k != "SHARDLINE_WARM_SOCKET"}
    full.update(env)
    if sock is not None:
        full["SHARDLINE_WARM_SOCKET"] = str(sock)
    return subprocess.Popen([sys.executable, "-m", "shardline.flows.warm", "a1", "b2"],
                            cwd=cwd, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def gone(pid: int, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not procs.alive(pid):
            return True
        time.sleep(0.1)
    return False


def test_the_run_is_a_forked_child_with_the_clients_output_env_cwd_and_exit_code(
        server: tuple[Path, subprocess.Popen[bytes]], tmp_path: Path) -> None:
    sock, proc = server
    work = tmp_path / "work"
    work.mkdir()
    c = client(sock, work, RUN_VALUE="v-42", RUN_CODE="3")
    out, err = c.communicate(timeout=60)
    assert c.returncode == 3, err
    words = out.split()
    assert words[:5] == ["ENGINE", "a1", "b2", "v-42", str(work)]
    assert int(words[6]) == proc.pid        # forked by the server, not started cold
    assert "to stderr" in err


def test_a_run_sends_what_prefect_still_queues_before_it_exits(
        server: tuple[Path, subprocess.Popen[bytes]], tmp_path: Path) -> None:
    sent = tmp_path / "sent"
    c = client(server[0], tmp_path, RUN_QUEUED=str(sent))
    _, err = c.communicate(timeout=60)
    assert c.returncode == 0, err
    assert sent.read_text().startswith("sent "), "the queued event was dropped at exit"


def test_sigterm_to_the_client_stops_the_run_and_a_killed_client_takes_it_along(
        server: tuple[Path, subprocess.Popen[bytes]], tmp_path: Path) -> None:
    sock, _ = server
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pidfile = tmp_path / f"run-{sig}.pid"
        c = client(sock, tmp_path, RUN_SLEEP="120", RUN_PIDFILE=str(pidfile))
        deadline = time.monotonic() + 60
        while not pidfile.exists() or not pidfile.read_text():
            assert time.monotonic() < deadline
            time.sleep(0.1)
        run = int(pidfile.read_text())
        c.send_signal(sig)
        c.communicate(timeout=30)
        assert c.returncode == -sig
        assert gone(run), f"the run {run} outlived its client ({sig!r})"


def test_without_a_server_the_client_runs_prefect_engine_cold(tmp_path: Path) -> None:
    c = client(tmp_path / "absent.sock", tmp_path)
    _, err = c.communicate(timeout=120)
    # prefect.engine itself ran: it wants a flow-run id this test does not give
    assert c.returncode != 0 and "Invalid flow run id" in err


def test_a_refused_fork_runs_that_run_cold_and_the_server_keeps_serving(
        tmp_path: Path) -> None:
    sock, proc = start_server(tmp_path, "first_fork_fails")
    try:
        first = client(sock, tmp_path)
        _, err = first.communicate(timeout=120)
        assert "could not fork" in err and "running this flow run cold" in err
        # prefect.engine itself ran (cold): it wants a flow-run id this test does not give
        assert first.returncode != 0 and "Invalid flow run id" in err
        assert proc.poll() is None, "the server stopped after a refused fork"
        second = client(sock, tmp_path, RUN_CODE="4")
        out, err = second.communicate(timeout=60)
        assert second.returncode == 4, err
        assert int(out.split()[6]) == proc.pid      # forked by the same server again
    finally:
        procs.stop(proc.pid, first=signal.SIGTERM, grace_s=10)
