"""The warm flow-run server when the kernel refuses a fork (flows/warm.py ``_fork_run``).

``os.fork`` is monkeypatched to raise OSError(EAGAIN) / OSError(ENOMEM): this simulates
resource exhaustion (the process limit, memory), which cannot be produced safely on a shared
test machine. The end-to-end case (a server that keeps serving, the client running cold)
is in tests/integration/test_warm.py."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys

import pytest

from shardline.flows import warm


def _request() -> tuple[socket.socket, socket.socket, list[int]]:
    server_end, client_end = socket.socketpair()
    fds = [os.open(os.devnull, os.O_RDONLY) for _ in range(3)]   # the client's stdio
    return server_end, client_end, fds


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError as exc:
        return exc.errno == errno.EBADF
    return False


@pytest.mark.parametrize("code", [errno.EAGAIN, errno.ENOMEM])
def test_a_refused_fork_tells_the_client_why_and_releases_the_request(
        monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    def no_fork() -> int:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(warm.os, "fork", no_fork)
    conn, client_end, fds = _request()
    req = {"argv": ["x"], "env": {"PREFECT__FLOW_RUN_ID": "run-1"}, "cwd": "/"}
    with client_end:
        assert warm._fork_run(conn, req, fds, None, "engine") is None
        reply, _ = warm._recv(client_end)
        assert reply is not None and "pid" not in reply
        assert os.strerror(code) in str(reply["error"]) and "cold" in str(reply["error"])
        assert client_end.recv(1) == b"", "the server kept the client's connection"
    assert all(_closed(fd) for fd in fds), "the client's stdio leaked in the server"


def test_the_client_runs_cold_when_the_server_refuses(tmp_path) -> None:
    """The client side of a refused fork: a server (a bare socket here) that answers with
    an error makes the client say why and exec the cold ``python -m prefect.engine``."""
    sock = tmp_path / "s.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(sock))
    srv.listen(1)
    env = dict(os.environ, SHARDLINE_WARM_SOCKET=str(sock))
    proc = subprocess.Popen([sys.executable, "-m", "shardline.flows.warm", "a1"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        conn, _ = srv.accept()
        with conn:
            req, fds = warm._recv(conn, 3)
            for fd in fds:
                os.close(fd)
            assert req is not None and req["argv"] == ["a1"]
            warm._send(conn, {"error": "the warm server could not fork (simulated)"})
        _, err = proc.communicate(timeout=120)
    finally:
        srv.close()
        if proc.poll() is None:
            proc.kill()
    assert "could not fork (simulated)" in err
    # prefect.engine itself ran (cold): it wants a flow-run id this test does not give
    assert proc.returncode != 0 and "Invalid flow run id" in err
