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

from shardline.core.errors import ShardlineError


class StartError(ShardlineError):
    """A server did not become healthy; the message points at its log."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Something accepts TCP connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """``host:port`` can be bound for listening right now (what a server will try)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # Servers set SO_REUSEADDR too: a port with only TIME_WAIT leftovers counts as free.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def log_tail(log_path: Path | None, lines: int = 15) -> str:
    """The last ``lines`` lines of a log file ('' when there is none)."""
    if log_path is None or not log_path.exists():
        return ""
    return "\n".join(log_path.read_text(errors="replace").splitlines()[-lines:])


def start(
    cmd: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None, user: int | None = None,
    group: int | None = None, extra_groups: list[int] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``cmd`` detached in its own process group, stdout+stderr appended to ``log_path``.

    ``user``/``group``/``extra_groups`` (uid, gid, gids) run it as another OS user (only
    root can; PostgreSQL refuses to run as root).

    SIGINT and SIGQUIT are reset to their defaults in the child: a launcher started in the
    background by a non-interactive shell (``nohup ... &``, some CI runners) ignores them,
    children inherit that, and a server we stop with SIGINT would then never stop."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        # Logs are appended across restarts; a header marks where this run begins.
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        log.write(f"\n===== {stamp} start: {' '.join(cmd)}\n".encode())
        log.flush()
        return subprocess.Popen(
            list(cmd), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=dict(env) if env is not None else None, cwd=cwd, start_new_session=True,
            preexec_fn=_default_signals, user=user, group=group, extra_groups=extra_groups,
        )


def _default_signals() -> None:
    """In the forked child, before exec: the signals we stop servers with take effect."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def alive(pid: int) -> bool:
    """The process ``pid`` exists and has not exited (zombies count as exited)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0): reap it if it is our child; if it is not (the CLI
    # that started it has exited), it has exited all the same.
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    return _proc_state(pid) not in ("Z", "X", None) if Path("/proc").is_dir() else True


def _proc_state(pid: int) -> str | None:
    """The state letter in /proc/<pid>/stat (R, S, Z, ...), None if it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError):
        return None


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot, from /proc), or None if it is gone.

    A PID in a state file may have been reused by an unrelated process after a reboot;
    comparing start times tells them apart, so we never signal a stranger.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # Field 22 (starttime); fields after the ")" closing the command name start at 3.
    return int(stat.rsplit(")", 1)[1].split()[19])


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is ``pgid``."""
    proc = Path("/proc")
    if not proc.is_dir():  # not Linux: ask the kernel whether the group exists at all
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        except PermissionError:
            pass
        return [pgid]
    out = []
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(d.name))
    return out


def _running(pid: int) -> bool:
    """The leader or any other member of its group (e.g. a JVM under a shell) still runs."""
    return alive(pid) or bool(group_members(pid))


def stop(pid: int, first: signal.Signals = signal.SIGTERM, grace_s: float = 15.0) -> bool:
    """Stop the process group led by ``pid`` (started by :func:`start`, so pgid == pid):
    ``first`` signal, again at half time, then SIGKILL. Waits until every process of the
    group is gone, not only the leader: a launcher script may exit before the JVM it
    started. Safe to call on a process that is already gone.

    Returns:
        True if the group exited on ``first``, False if it had to be killed.
    """
    if not _running(pid):
        return True

    def send(sig: signal.Signals) -> None:
        # A group id equal to a dead leader's pid can only be that leader's group: Linux
        # does not hand out a PID that is still in use as a process-group id.
        for t in (-pid, pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(t, sig)

    send(first)
    deadline = time.monotonic() + grace_s
    resent = False
    while time.monotonic() < deadline:
        if not _running(pid):
            return True
        if not resent and time.monotonic() > deadline - grace_s / 2:
            send(first)
            resent = True
        time.sleep(0.1)
    send(signal.SIGKILL)
    for _ in range(50):
        if not _running(pid):
            break
        time.sleep(0.1)
    return False


def http_ok(url: str, timeout_s: float = 2.0) -> bool:
    """``url`` answers HTTP with a status below 500."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return bool(r.status < 500)
    except urllib.error.HTTPError as exc:
        return exc.code < 500
    except (urllib.error.URLError, OSError):
        return False
