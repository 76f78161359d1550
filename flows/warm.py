"""Warm flow-run processes for the embedded stack's process worker.

Every flow run of a process worker is a fresh ``python -m prefect.engine``: before a run does
any work it imports Prefect (~0.9 s CPU here), its flow module (the train flow imports torch,
~1.6 s) and, for ingest, great-expectations (~2.9 s). On the embedded stack those imports
were about a third of upload -> training started. This module removes them from the path:

- ``python -m shardline.flows.warm serve --socket PATH`` (started by ``shardline up``) imports
  Prefect, both flows and great-expectations once, then waits on a unix socket. It runs no
  thread and no event loop, so forking it is safe.
- ``python -m shardline.flows.warm`` is the deployments' command (``prefect.yaml``). It
  hands its argv, environment, working folder and stdin/stdout/stderr to the server, which
  forks a child that runs ``prefect.engine`` exactly as the cold command would; the client
  forwards SIGTERM/SIGINT to that child, and exits with its exit code. When the child sees
  the client go away (the worker killed it), it stops too.
- Without ``SHARDLINE_WARM_SOCKET``, with the server not answering, or when the run's
  ``PREFECT_*`` settings differ from the server's (the imported Prefect settings would be
  stale), it runs the cold ``python -m prefect.engine`` instead: the command works in any
  image that has shardline installed (Kubernetes, compose), just without the head start.
  So does a run the server cannot fork (EAGAIN at the process limit, ENOMEM): the server
  tells the client why (in the run's log) and goes on serving later runs.

The client imports nothing but the standard library.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import sys

SOCKET_ENV = "SHARDLINE_WARM_SOCKET"
# what a warm child has imported already (the deployments' entrypoints and their heavy deps)
PRELOAD = ("prefect.engine", "prefect.flow_engine", "prefect_aws",
           "shardline.flows.ingest", "shardline.flows.train", "great_expectations")
# settings Prefect reads once at import (profiles, logging): a run whose environment sets
# them differently from the server's runs cold; the rest are re-read in the child
_IMPORT_TIME = ("PREFECT_HOME", "PREFECT_PROFILES_PATH", "PREFECT_PROFILE", "PREFECT_LOGGING_",
                "PREFECT_API_URL")


def _cold(argv: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, "-m", "prefect.engine", *argv])


def _send(conn: socket.socket, doc: dict[str, object], fds: list[int] | None = None) -> None:
    data = json.dumps(doc).encode()
    msg = struct.pack("!I", len(data)) + data
    if fds:
        conn.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(
            f"{len(fds)}i", *fds))])
    else:
        conn.sendall(msg)


def _recv(conn: socket.socket, nfds: int = 0) -> tuple[dict[str, object] | None, list[int]]:
    """One length-prefixed JSON message (and up to ``nfds`` file descriptors); None at EOF."""
    buf, fds = b"", []
    while len(buf) < 4:
        chunk, anc, _, _ = conn.recvmsg(4 - len(buf), socket.CMSG_SPACE(nfds * 4) if nfds else 0)
        for level, kind, raw in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += list(struct.unpack(f"{len(raw) // 4}i", raw[: len(raw) // 4 * 4]))
        if not chunk:
            return None, fds
        buf += chunk
    (n,) = struct.unpack("!I", buf)
    body = b""
    while len(body) < n:
        chunk = conn.recv(n - len(body))
        if not chunk:
            return None, fds
        body += chunk
    return json.loads(body), fds


# -- client: the command the worker runs --------------------------------------------------
def client(argv: list[str]) -> None:
    path = os.environ.get(SOCKET_ENV, "")
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if not path:
            raise OSError("no warm server configured")
        conn.connect(path)
        _send(conn, {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}, [0, 1, 2])
        started, _ = _recv(conn)
    except OSError:
        started = None
    child = started.get("pid") if started else None
    if not isinstance(child, int):
        if started and started.get("error"):
            print(f"shardline.flows.warm: {started['error']}", file=sys.stderr, flush=True)
        conn.close()
        _cold(argv)
        return

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    while True:
        try:
            done, _ = _recv(conn)
            break
        except InterruptedError:
            continue
    code = done.get("code") if done else None
    if isinstance(code, int) and code < 0:   # the run died of a signal: so do we, as cold
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code if isinstance(code, int) else 1)


# -- server --------------------------------------------------------------------------------
def _settings(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(_IMPORT_TIME)}


def _code_stamp() -> dict[str, float]:
    """mtime of every imported shardline module file: edited code (an editable install)
    makes the warm copy stale."""
    import shardline

    roots = tuple(os.path.realpath(p) for p in shardline.__path__)
    out: dict[str, float] = {}
    for mod in list(sys.modules.values()):
        path = getattr(mod, "__file__", None)
        if path and os.path.realpath(path).startswith(roots):
            try:
                out[path] = os.stat(path).st_mtime
            except OSError:
                out[path] = -1.0
    return out


_STAMP: dict[str, float] = {}


def _child(conn: socket.socket, req: dict[str, object], fds: list[int], engine: str) -> None:
    """In the forked child: become the flow-run process; never returns."""
    code = 1
    try:
        for target, fd in zip((0, 1, 2), fds, strict=False):
            os.dup2(fd, target)
        for fd in fds:
            os.close(fd)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        env = {str(k): str(v) for k, v in dict(req["env"]).items()}  # type: ignore[call-overload]
        argv = [str(a) for a in req["argv"]]  # type: ignore[attr-defined]
        os.chdir(str(req["cwd"]))
        now = _code_stamp()
        changed = sorted(p for p in set(now) | set(_STAMP) if now.get(p) != _STAMP.get(p))
        why = ("this run's Prefect settings differ from the warm server's"
               if _settings(env) != _settings(dict(os.environ)) else
               f"shardline's code changed since the warm server imported it ({changed[0]}"
               f"{f' and {len(changed) - 1} more' if len(changed) > 1 else ''}; restart the "
               "stack to warm the new code)" if changed else None)
        if why:
            print(f"shardline.flows.warm: {why}; running this flow run cold", file=sys.stderr,
                  flush=True)
            os.execve(sys.executable, [sys.executable, "-m", "prefect.engine", *argv], env)
        os.environ.clear()
        os.environ.update(env)
        import prefect.context

        prefect.context.refresh_global_settings_context()   # the run's settings, not ours
        _watch_client(conn)
        import runpy

        sys.argv = [engine, *argv]
        try:
            runpy.run_module(engine, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        _drain_prefect()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _drain_prefect(timeout_s: float = 30.0) -> None:
    """Send what Prefect still has queued (events such as ``shardline.dataset.published``,
    task-run state events, API logs) before ``os._exit``, which skips the interpreter's exit
    hooks where a cold ``prefect.engine`` process does this."""
    for module, name in (("prefect.events.worker", "EventsWorker"),
                         ("prefect.logging.handlers", "APILogWorker")):
        mod = sys.modules.get(module)
        if mod is None:
            continue
        try:
            getattr(mod, name).drain_all(timeout=timeout_s)
        except Exception as exc:    # never keep the run's process from exiting
            print(f"shardline.flows.warm: could not flush Prefect's {name}: {exc}",
                  file=sys.stderr, flush=True)


def _watch_client(conn: socket.socket) -> None:
    """The client holds the other end: when it dies (the worker killed it) stop this run as
    the worker meant to stop the cold process."""
    import threading

    def watch() -> None:
        try:
            while conn.recv(1):
                pass
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="warm-client-watch", daemon=True).start()


def _fork_run(conn: socket.socket, req: dict[str, object], fds: list[int],
              lsock: socket.socket | None, engine: str) -> int | None:
    """Fork the run's process and tell the client its pid. When the kernel refuses the fork
    (EAGAIN at the process limit, ENOMEM) the client is told why and runs the flow run cold
    itself (an exec, no new process), and the server goes on serving: None."""
    run = dict(req.get("env") or {}).get("PREFECT__FLOW_RUN_ID", "?")  # type: ignore[call-overload]
    try:
        try:
            pid = os.fork()
        except OSError as exc:
            why = f"the warm server could not fork ({exc}); running this flow run cold"
            print(f"flow run {run}: {why}", flush=True)
            with contextlib.suppress(OSError):
                _send(conn, {"error": why})
            conn.close()
            return None
        if pid == 0:
            if lsock is not None:
                lsock.close()
            _child(conn, req, fds, engine)
    finally:   # the parent's copies (the child never returns here)
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
    print(f"flow run {run}: forked pid {pid}", flush=True)
    with contextlib.suppress(OSError):
        _send(conn, {"pid": pid})
    return pid


def serve(path: str, preload: tuple[str, ...] = PRELOAD, engine: str = "prefect.engine") -> None:
    """Import ``preload``, then fork one child per client that runs ``engine`` as __main__
    (``prefect.engine``; tests pass a small module); until SIGTERM/SIGINT."""
    import importlib
    import select

    for name in preload:
        importlib.import_module(name)
    if preload:
        warm_s3_client()
    _STAMP.update(_code_stamp())
    if os.path.exists(path):
        os.unlink(path)
    lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lsock.bind(path)
    os.chmod(path, 0o600)
    lsock.listen(64)
    children: dict[int, socket.socket] = {}
    stop = False

    def on_stop(_signum: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    print(f"warm flow-run server ready on {path} ({', '.join(preload)})", flush=True)
    while not stop:
        try:
            ready, _, _ = select.select([lsock], [], [], 0.2)
        except InterruptedError:
            continue
        if ready:
            conn, _ = lsock.accept()
            try:
                req, fds = _recv(conn, 3)
                if req is None or len(fds) != 3:
                    raise OSError("bad request")
            except (OSError, ValueError):
                conn.close()
                continue
            pid = _fork_run(conn, req, fds, lsock, engine)
            if pid is not None:
                children[pid] = conn
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            done = children.pop(pid, None)
            print(f"pid {pid} exited: {os.waitstatus_to_exitcode(status)}", flush=True)
            if done is not None:
                with contextlib.suppress(OSError):
                    _send(done, {"code": os.waitstatus_to_exitcode(status)})
                done.close()
    lsock.close()
    os.unlink(path)
    for pid in children:   # runs still going: they are the worker's; let them finish
        print(f"warm server stopping; flow-run process {pid} keeps running", flush=True)


def warm_s3_client() -> None:
    """Build (and drop) one boto3 S3 client, no request made: botocore parses its service
    models once per process (~0.3 s of CPU), so every later client in this process, or in a
    child forked from it, is cheap."""
    import boto3

    boto3.session.Session().client("s3", endpoint_url="http://127.0.0.1:9",
                                   aws_access_key_id="x", aws_secret_access_key="x",
                                   region_name="us-east-1")


def main(argv: list[str]) -> None:
    if argv[:1] == ["serve"]:
        import argparse

        p = argparse.ArgumentParser(prog="python -m shardline.flows.warm serve")
        p.add_argument("--socket", required=True)
        p.add_argument("--preload", nargs="*", default=list(PRELOAD))
        p.add_argument("--engine", default="prefect.engine", help=argparse.SUPPRESS)
        a = p.parse_args(argv[1:])
        serve(a.socket, tuple(a.preload), a.engine)
    else:
        client(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
