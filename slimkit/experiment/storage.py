"""Where a study lives: the journal file in the experiment folder, or a database server workers share.

Without a URL the study is Optuna's ``JournalStorage`` in ``<folder>/study.journal`` (several local processes
share it safely; a ``flock`` serialises asking). With a URL (``--storage postgresql://user:pw@host/db`` or
``"storage"`` in the file) it is Optuna's ``RDBStorage`` with heartbeats: every running trial records one each
``heartbeat_interval`` seconds, a trial silent for ``grace_period`` seconds (its worker died) is failed by the
next worker that asks and queued again with the same parameters (Optuna's ``RetryHeartbeatStaleTrialCallback``),
and a PostgreSQL advisory lock serialises asking across machines so the study stops at exactly ``n_samples``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import re
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import JournalStorage, RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock
from sqlalchemy import text

from slimkit.errors import ConfigError, MissingPackageError, SlimkitError

JOURNAL = "study.journal"
SCHEMES = ("postgresql", "postgres", "mysql", "sqlite")
_OPENED: dict[tuple[str, int, int], RDBStorage] = {}
#: journal operations synced to disk at once (Optuna's on-disk op codes): create/delete study (0, 1), study user and
#: system attributes (2, 3), a trial's state and values (6: its end), discarded trials (10)
_SYNCED = {0, 1, 2, 3, 6, 10}


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***`` (safe to print)."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


def _sqlalchemy_url(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    base, _, driver = scheme.partition("+")
    if not sep or base not in SCHEMES:
        raise ConfigError(f"storage: {redact(url)!r} is not a database URL; use "
                          "postgresql://USER:PASSWORD@HOST:PORT/DB (or mysql://..., sqlite:///FILE), or leave it "
                          "out for the journal file in the experiment folder.")
    if base in ("postgresql", "postgres") and not driver:
        # SQLAlchemy's plain postgresql:// means psycopg2 before 2.1; use psycopg (3) when only it is installed
        have2 = importlib.util.find_spec("psycopg2") is not None
        have3 = importlib.util.find_spec("psycopg") is not None
        if not (have2 or have3):
            raise MissingPackageError("A PostgreSQL storage needs a driver, which is not installed; "
                                      "`pip install 'slimkit[cluster]'` (or `pip install 'psycopg[binary]'`).")
        return f"postgresql+{'psycopg2' if have2 else 'psycopg'}://{rest}"
    return url


@dataclass(frozen=True)
class Store:
    """The study's storage: ``url`` None = the journal file; else a database with heartbeats (seconds)."""

    url: str | None = None
    heartbeat_interval: int = 10
    grace_period: int = 30
    #: further attempts to reach the database when it does not answer (None: fail at once) and seconds between
    connect_retries: int | None = None
    connect_wait: float = 30.0

    @property
    def shared(self) -> bool:
        """Whether workers on other machines may share this study (a database URL)."""
        return self.url is not None

    def study_name(self, exp_name: str) -> str:
        """One study per folder in a journal (``slimkit``); the experiment's name in a shared database."""
        return f"slimkit:{exp_name}" if self.shared else "slimkit"

    def open(self, folder: Path) -> optuna.storages.BaseStorage:
        """The Optuna storage (a database connection is opened once per process and checked at once)."""
        if self.url is None:
            return JournalStorage(JournalFile(str(folder / JOURNAL)))
        key = (self.url, self.heartbeat_interval, self.grace_period)
        if key not in _OPENED:
            for attempt in range((self.connect_retries or 0) + 1):  # resource_args.max_retries / reconn_wait_time
                try:
                    _OPENED[key] = self._connect()
                    break
                except SlimkitError as exc:
                    if isinstance(exc, MissingPackageError) or attempt == (self.connect_retries or 0):
                        raise
                    time.sleep(self.connect_wait)
        return _OPENED[key]

    def _connect(self) -> RDBStorage:
        assert self.url is not None
        url = _sqlalchemy_url(self.url)
        postgres = url.startswith("postgresql")
        engine = {"connect_args": {"connect_timeout": 10}, "pool_pre_ping": True} if postgres else {}
        for attempt in range(6):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    return RDBStorage(url, engine_kwargs=engine,
                                      heartbeat_interval=self.heartbeat_interval, grace_period=self.grace_period,
                                      heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=3))
            except ModuleNotFoundError as exc:
                raise MissingPackageError(f"The storage {redact(self.url)} needs the {exc.name!r} driver, which is "
                                          "not installed; `pip install 'slimkit[cluster]'`.") from None
            except Exception as exc:  # SQLAlchemy's OperationalError and friends: say what the server said
                message = str(getattr(exc, "orig", None) or exc).strip().replace(self.url, redact(self.url))
                if attempt < 5 and ("already exists" in message or "duplicate key" in message):
                    time.sleep(0.5 + attempt)  # workers started together race to create Optuna's tables
                    continue
                raise SlimkitError(f"Cannot open the study storage {redact(self.url)}: {message}. Check that the "
                                   "server runs and accepts connections from this machine, and the user, password "
                                   "and database name (the password can also come from the PGPASSWORD environment "
                                   "variable).") from None
        raise AssertionError("unreachable")

    @contextlib.contextmanager
    def ask_lock(self, folder: Path, study_name: str) -> Iterator[None]:
        """Serialise asking for trials: a ``flock`` in the folder, or a PostgreSQL advisory lock on the server."""
        if self.url is None or not _sqlalchemy_url(self.url).startswith("postgresql"):
            with file_lock(folder / "ask.lock"):
                yield
            return
        storage = self.open(folder)
        key = int.from_bytes(hashlib.sha256(study_name.encode()).digest()[:7], "big")
        with storage.engine.connect() as connection:  # the lock dies with the connection (a killed worker)
            connection.execute(text("SELECT pg_advisory_lock(:k)"), {"k": key})
            try:
                yield
            finally:
                connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})


class JournalFile(JournalFileBackend):
    """Optuna's journal file, synced to disk when a study or a trial's state changes, not on every record.

    Optuna fsyncs each record: a trial's parameters, user attributes and every intermediate value of its learning
    curve (~5 ms each on a busy disk, most of the runner's per-step cost). A written record is in the operating
    system's page cache, so it survives the runner being killed (resume re-runs interrupted trials); only a machine
    crash can lose the records after the last sync, and those trials are then run again on resume.
    """

    def __init__(self, path: str) -> None:
        self._path, self._append_lock = path, JournalFileSymlinkLock(path)  # Optuna's default lock, as before
        super().__init__(path, lock_obj=self._append_lock)

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        """Append ``logs``; fsync only when one of them creates or changes a study or ends a trial."""
        self._append_lock.acquire()
        try:
            with open(self._path, "ab") as f:
                f.write(("\n".join(json.dumps(log, separators=(",", ":")) for log in logs) + "\n").encode("utf-8"))
                f.flush()
                if any(log.get("op_code") in _SYNCED for log in logs):
                    os.fsync(f.fileno())
        finally:
            self._append_lock.release()


def forget_connections() -> None:
    """In a forked process: drop the parent's database connections without closing them (they are its)."""
    for storage in _OPENED.values():
        storage.engine.dispose(close=False)
    _OPENED.clear()


@contextlib.contextmanager
def file_lock(path: Path, blocking: bool = True, shared: bool = False) -> Iterator[bool]:
    """A ``flock`` on ``path`` (exclusive, or ``shared``; released when the process dies).

    Yields False when ``blocking`` is off and another process holds a conflicting lock.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


class Heartbeat:
    """Record a running trial's heartbeat every ``interval`` seconds in a thread (a database storage only)."""

    def __init__(self, storage: Any, trial_id: int) -> None:
        self._storage, self._trial_id = storage, trial_id
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Heartbeat:
        interval = getattr(self._storage, "get_heartbeat_interval", lambda: None)()
        if interval:
            self._thread = threading.Thread(target=self._beat, args=(interval,), daemon=True)
            self._thread.start()
        return self

    def _beat(self, interval: float) -> None:
        while True:
            self._storage.record_heartbeat(self._trial_id)
            if self._stop.wait(interval):
                return

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
