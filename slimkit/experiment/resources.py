"""Where jobs run: Auptimizer's ``resource``, its ``resource_args`` for remote machines and ``runtime_args``' shell.

======== ===================================================================================================
resource what ``slimkit run`` does
======== ===================================================================================================
cpu      runs ``n_parallel`` jobs at a time on this machine, with no GPU visible to them
gpu      the same with the machine's GPUs visible (refused when torch sees none)
node     jobs on several machines: the study lives in a database they share (``"storage"`` or ``--storage``,
         PostgreSQL); ``slimkit run`` works as one machine and ``slimkit worker EXPERIMENT --storage URL`` on
         each other machine joins the same study (Optuna's RDB storage; heartbeats re-run a dead machine's trial)
passive  ``slimkit run`` creates the study in the shared database, prints the ``slimkit worker`` command and runs
         no job itself: it waits until workers started elsewhere have finished ``n_samples`` trials, then
         reports (Auptimizer's passive mode, where jobs are run by hand)
aws      as ``node``, on cloud instances: slimkit starts and stops no instance; start ``slimkit worker`` on each
======== ===================================================================================================

Auptimizer's SSH settings of ``node`` (in ``resource_args``) become their database-worker meaning:
``max_retries`` / ``reconn_wait_time`` are the attempts to reach the study's database and the seconds between
them; ``async_timeout`` is the seconds a job may run (``job_timeout`` when that is absent); ``async_reconnect`` is
how often a running trial reports it is alive (the heartbeat, unless ``--heartbeat-interval`` is given);
``async_run`` is accepted (a worker's jobs never depend on a connection to the machine that started the study).
For ``aws``, ``connection_retry`` is the attempts to reach the database 30 s apart (Auptimizer's interval).
``shutdown`` (true or false) is accepted on every resource and the file runs as written: slimkit starts and stops
no machine, so ``true`` has nothing to shut down; ``slimkit run`` says so in one warning line (a cloud instance
is stopped after its worker exits: ``slimkit worker ...; sudo poweroff``).

``runtime_args`` ``prescript`` / ``postscript`` (shell commands run before / after each job, in the same shell),
``env`` (extra environment variables) and ``overwrite`` (accepted: slimkit copies no script to other machines,
each worker runs the script in its own ``workingdir``) are instructions to the runner and stay out of the job
config; every other ``runtime_args`` key is a value the script reads from it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from slimkit.errors import ConfigError
from slimkit.experiment.space import bounded, one_of

RESOURCES = ("cpu", "gpu", "node", "passive", "aws")
#: resources whose study must live in a database other machines reach
SHARED = ("node", "passive", "aws")
NODE_FIELDS = ("max_retries", "reconn_wait_time", "async_run", "async_reconnect", "async_timeout")
AWS_FIELDS = ("connection_retry",)
RUNNER_KEYS = ("prescript", "postscript", "env", "overwrite")


@dataclass
class Resource:
    """The checked resource, its remote-machine settings and the shell around each job."""

    kind: str = "cpu"
    #: attempts to reach the study's database (None: fail at once) and seconds between them
    connect_retries: int | None = None
    connect_wait: float = 30.0
    #: seconds between a running trial's heartbeats, when the file sets it (async_reconnect)
    heartbeat: int | None = None
    #: a job's time limit from async_timeout (None: not given)
    job_timeout: float | None = None
    #: Auptimizer's ``shutdown`` (stop the machines after the study): accepted, nothing is shut down
    shutdown: bool = False
    prescript: str = ""
    postscript: str = ""
    env: dict[str, str] = field(default_factory=dict)

    @property
    def shared(self) -> bool:
        """Whether the study must live in a database several machines share."""
        return self.kind in SHARED

    def command(self, command: list[str]) -> list[str]:
        """``command`` wrapped in ``sh -c`` with the pre- and postscript; its exit status stays the job's."""
        if not (self.prescript or self.postscript):
            return command
        body = f'{self.prescript}\n"$@"\nstatus=$?\n{self.postscript}\nexit $status\n'
        return ["/bin/sh", "-c", body, "job", *command]


def _number(args: Mapping[str, Any], key: str, integer: bool, low: float) -> Any:
    return bounded(args[key], f"resource_args.{key}", low, integer=integer, must=False)


def parse_resource(kind: str, args: Mapping[str, Any], runtime_args: Mapping[str, Any]) -> Resource:
    """Check ``resource_args``' remote-machine fields and ``runtime_args``' runner keys for ``kind``."""
    out = Resource(kind)
    for key in AWS_FIELDS:
        if key in args and kind != "aws":
            raise ConfigError(f"resource_args.{key}: belongs to the 'aws' resource; remove it, or set \"resource\": "
                              "\"aws\".")
    if not isinstance(args.get("shutdown", False), bool):
        raise ConfigError(f"resource_args.shutdown: true or false; got {args['shutdown']!r}.")
    out.shutdown = args.get("shutdown", False)
    if "connection_retry" in args:
        out.connect_retries = _number(args, "connection_retry", True, 0)
    if "max_retries" in args:
        out.connect_retries = _number(args, "max_retries", True, 0)
    if "reconn_wait_time" in args:
        out.connect_wait = float(_number(args, "reconn_wait_time", False, 0))
    if "async_reconnect" in args:
        out.heartbeat = max(1, round(_number(args, "async_reconnect", False, 1)))
    if args.get("async_timeout") is not None:
        out.job_timeout = float(_number(args, "async_timeout", False, 1e-9))
    if "async_run" in args and not isinstance(args["async_run"], bool):
        raise ConfigError(f"resource_args.async_run: true or false; got {args['async_run']!r}.")
    for key in ("prescript", "postscript"):
        value = runtime_args.get(key, "")
        if not isinstance(value, str) or "\0" in value:
            raise ConfigError(f"runtime_args.{key}: shell commands as one string (separate them with ';'); "
                              f"got {value!r}.")
        setattr(out, key, value.strip().strip(";").strip())  # Auptimizer joins them with ';' itself
    env = runtime_args.get("env", {})
    if not isinstance(env, Mapping) or not all(isinstance(k, str) and k and "=" not in k and "\0" not in k
                                               and isinstance(v, (str, int, float)) and "\0" not in str(v)
                                               for k, v in env.items()):
        raise ConfigError(f"runtime_args.env: environment variables as an object of names and text or number "
                          f"values, e.g. {{\"CUDA_VISIBLE_DEVICES\": \"0\"}}; got {env!r}.")
    out.env = {k: v if isinstance(v, str) else json.dumps(v) for k, v in env.items()}  # 7 -> "7", true -> "true"
    if not isinstance(runtime_args.get("overwrite", False), bool):
        raise ConfigError(f"runtime_args.overwrite: true or false; got {runtime_args['overwrite']!r}.")
    return out


def check_resource_kind(value: Any) -> str:
    """``resource``: one of :data:`RESOURCES` (``gpu`` only where torch sees a CUDA device)."""
    if one_of(value, "resource", RESOURCES) == "gpu":
        import torch

        if not torch.cuda.is_available():
            raise ConfigError("resource: 'gpu' but torch sees no CUDA device on this machine "
                              "(torch.cuda.is_available() is False); use 'cpu' or run where a GPU is visible.")
    return value


def shutdown_warning(resource: Resource) -> str | None:
    """The one warning line ``shutdown: true`` earns (slimkit stops no machine), None without it."""
    if not resource.shutdown:
        return None
    where = ("each machine runs `slimkit worker`, which exits when the study is finished: stop an instance after it "
             "(`slimkit worker EXPERIMENT --storage URL; sudo poweroff`)" if resource.shared else
             "the jobs run on this machine")
    return (f"slimkit: warning: resource_args.shutdown: true: slimkit starts and stops no machine, so nothing is shut "
            f"down after the study ({where}).")


def job_values(runtime_args: Mapping[str, Any]) -> dict[str, Any]:
    """The ``runtime_args`` a script reads from its job config (the runner's own keys left out)."""
    return {k: v for k, v in runtime_args.items() if k not in RUNNER_KEYS}


def needs_database(resource: Resource, url: str | None) -> None:
    """Refuse ``node`` / ``passive`` and the database-only ``resource_args`` without a shared study."""
    if url is not None:
        return
    if resource.shared:
        raise ConfigError(f"resource: {resource.kind!r} runs the study's jobs on machines that share it through a "
                          "database; give --storage postgresql://USER:PASSWORD@HOST:5432/DB (or \"storage\" in the "
                          "file) and start `slimkit worker EXPERIMENT --storage URL` on each machine. On this machine "
                          "alone, use 'cpu' or 'gpu'.")
    if resource.connect_retries is not None or resource.heartbeat is not None:
        key = "max_retries" if resource.connect_retries is not None else "async_reconnect"
        raise ConfigError(f"resource_args.{key}: a setting of a study shared through a database (--storage URL); "
                          "this study is the journal file in the experiment folder, so remove it or give --storage.")
