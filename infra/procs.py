"""Start and stop background server processes by PID, and wait for them to be healthy.

Every server shardline starts runs in its own session (process group), writes its log to a
file, and is stopped by PID: first a polite signal, then SIGKILL to the whole group after a
grace period, so nothing is left behind even when a server ignores SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from shardline.errors import ShardlineError


class StartError(ShardlineError):
    """A server did not become healthy; the message points at its log."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def start(
    cmd: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``cmd`` detached in its own process group, stdout+stderr appended to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            list(cmd), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=dict(env) if env is not None else None, cwd=cwd, start_new_session=True,
        )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); reap it if it is ours.
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    return True


def stop(pid: int, first: signal.Signals = signal.SIGTERM, grace_s: float = 15.0) -> None:
    """Stop the process group led by ``pid``: ``first`` signal, again at half time, then
    SIGKILL. Safe to call on a process that is already gone."""
    if not alive(pid):
        return
    targets = [pid]
    with contextlib.suppress(ProcessLookupError, PermissionError):
        targets = [-os.getpgid(pid), pid]
    def send(sig: signal.Signals) -> None:
        for t in targets:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(t, sig)
    send(first)
    deadline = time.monotonic() + grace_s
    resent = False
    while time.monotonic() < deadline:
        if not alive(pid):
            return
        if not resent and time.monotonic() > deadline - grace_s / 2:
            send(first)
            resent = True
        time.sleep(0.1)
    send(signal.SIGKILL)
    for _ in range(50):
        if not alive(pid):
            return
        time.sleep(0.1)


def wait_http(url: str, timeout_s: float, proc: subprocess.Popen[bytes] | None = None,
              log_path: Path | None = None) -> None:
    """Wait until ``url`` answers HTTP (any status below 500)."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise StartError(_died(url, proc.returncode, log_path))
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status < 500:
                    return
        except urllib.error.HTTPError as exc:
            if exc.code < 500:
                return
            last = exc
        except (urllib.error.URLError, OSError) as exc:
            last = exc
        time.sleep(0.2)
    raise StartError(f"{url} did not answer within {timeout_s:.0f}s ({last}); "
                     f"see {log_path or 'the server log'}")


def wait_port(port: int, timeout_s: float, proc: subprocess.Popen[bytes] | None = None,
              log_path: Path | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise StartError(_died(f"port {port}", proc.returncode, log_path))
        if port_in_use(port):
            return
        time.sleep(0.2)
    raise StartError(f"nothing listened on 127.0.0.1:{port} within {timeout_s:.0f}s; "
                     f"see {log_path or 'the server log'}")


def _died(what: str, rc: int | None, log_path: Path | None) -> str:
    tail = ""
    if log_path is not None and log_path.exists():
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
    return f"the server for {what} exited with code {rc} before it was ready; log tail:\n{tail}"
