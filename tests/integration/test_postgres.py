"""The stack's PostgreSQL when started by root without user namespaces (Docker's default
seccomp profile forbids them): it runs as the unprivileged system user, or refuses with a
clear error when that user cannot reach the home folder.

``_userns_works`` is patched to False to select that branch: whether the kernel allows user
namespaces is a property of the host that a test cannot change otherwise. Everything else
is real (initdb, the server, pg_isready).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from shardline.infra import postgres, procs

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(os.geteuid() != 0, reason="the root-only branches")]


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder every user can search (as a stack home outside root's private folders)."""
    d = Path(tempfile.mkdtemp(prefix="shardline-pg-", dir="/tmp"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _uid(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(ln for ln in status.splitlines() if ln.startswith("Uid:")).split()[1])


def test_root_without_userns_runs_as_the_system_user(
        open_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(postgres, "_userns_works", lambda prefix: False)
    db = postgres.Database(open_dir / "postgres", procs.free_port())
    svc = postgres.launch_postgres(db, open_dir / "logs").wait(60)
    try:
        user = postgres.pwd.getpwnam(postgres.DEFAULT_OS_USER)
        assert _uid(svc.pid) == user.pw_uid != 0
        assert db.data.stat().st_uid == user.pw_uid
        assert (db.data.stat().st_mode & 0o777) == 0o700
        assert (db.password_file.stat().st_uid, db.password_file.stat().st_mode & 0o777) == \
            (0, 0o600)  # the password stays the caller's
    finally:
        assert svc.stop(10)
    # Started again with user namespaces available, it keeps the data's owner.
    monkeypatch.undo()
    svc = postgres.launch_postgres(db, open_dir / "logs").wait(60)
    try:
        assert _uid(svc.pid) == db.data.stat().st_uid != 0
    finally:
        assert svc.stop(10)


def test_root_without_userns_and_an_unreachable_home_is_a_clear_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(postgres, "_userns_works", lambda prefix: False)
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    db = postgres.Database(private / "home" / "postgres", procs.free_port())
    with pytest.raises(postgres.PostgresError,
                       match=r"refuses to run as root.*cannot reach .*private/home.*"
                             r"SHARDLINE_HOME.*SHARDLINE_PREFECT_DB=sqlite"):
        postgres.launch_postgres(db, tmp_path / "logs")
    assert not db.data.exists()
