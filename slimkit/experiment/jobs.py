"""One trial's job: a user script in its own process, or slimkit's own smash + measure (script-free form).

Every job gets its own folder (``trials/<number>/``) holding ``job.json`` (the config the script reads),
``log.txt`` (everything the job printed) and, with ``save_model``, ``model/``. A job that crashes, exceeds
``job_timeout`` or reports no result ends as a failure whose reason and log tail the runner records.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slimkit.core.io import write_json_atomic
from slimkit.errors import ConfigError
from slimkit.experiment.experiment_file import Experiment
from slimkit.experiment.proposers import budget as proposer_budget
from slimkit.experiment.resources import job_values
from slimkit.experiment.result import StepReader, parse_result
from slimkit.experiment.space import fixed_config_list

LOG_TAIL_LINES = 20


@dataclass
class JobOutcome:
    """How a job ended: ``complete`` with its objective values, ``failed`` with a reason, or ``pruned``."""

    state: str
    values: list[float] = field(default_factory=list)
    reason: str = ""
    log_tail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file ('' when it does not exist)."""
    if not path.is_file():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def job_config(exp: Experiment, values: Mapping[str, Any], trial_dir: Path, number: int) -> dict[str, Any]:
    """The job config a script receives (Auptimizer's keys; ranges replaced by this trial's values).

    Each ``parameter_config`` name holds its value at the top (``config.lr``); a ``compression`` block adds
    ``compression_framework``, ``compression_type``, ``compressor`` and the ``config_list`` with this trial's values.
    """
    config: dict[str, Any] = {name: values[name] for name in exp.hyperparameters}
    if exp.compression is not None:
        config.update(compression_framework=exp.compression["framework"], compression_type=exp.compression["type"],
                      compressor=exp.compression["compressor"],
                      config_list=fixed_config_list(exp.compression["config_list"], values))
    config.update(folder_name=str(trial_dir / "model"), save_model=exp.save_model, job_id=number,
                  resource=exp.resource)
    budget = proposer_budget(exp.proposer, exp.proposer_options)
    if budget is not None:  # hyperband/bohb: the most steps a trial may run (the pruner may stop it sooner)
        config["n_iterations"] = budget
    config.update(job_values(exp.runtime_args))
    return config


def die_with_parent() -> None:
    """Linux: get SIGKILL when the parent process dies, so a killed runner leaves no orphan job running."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _kill(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()


def run_script_job(exp: Experiment, values: Mapping[str, Any], trial_dir: Path, number: int,
                   on_intermediate: Callable[[int, float], bool] | None = None) -> JobOutcome:
    """Run the experiment's script on this trial's config; ``on_intermediate(step, value)`` True stops it (pruned)."""
    assert exp.script is not None
    trial_dir.mkdir(parents=True, exist_ok=True)
    config_path = write_json_atomic(trial_dir / "job.json", job_config(exp, values, trial_dir, number))
    log_path = trial_dir / "log.txt"
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])  # the folder holding this slimkit
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONUNBUFFERED"] = "1"
    if exp.resource == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    env.update(exp.resources.env)
    plain = [str(exp.script), str(config_path)]
    if exp.script.suffix == ".py" or not os.access(exp.script, os.X_OK):
        plain.insert(0, sys.executable)  # the runner's own Python (and its slimkit)
    command = exp.resources.command(plain)
    lines: queue.Queue[str | None] = queue.Queue()
    with open(log_path, "w") as log:
        shown = [exp.resources.prescript, " ".join(plain), exp.resources.postscript]
        log.write(f"$ {'; '.join(filter(None, shown))}\n")
        log.flush()
        process = subprocess.Popen(command, cwd=exp.workingdir, env=env, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                                   preexec_fn=die_with_parent)

        def pump() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        output: list[str] = []
        steps = StepReader()
        deadline = time.monotonic() + exp.job_timeout
        reason = ""
        while True:
            try:
                line = lines.get(timeout=max(0.01, min(0.5, deadline - time.monotonic())))
            except queue.Empty:
                if time.monotonic() >= deadline:
                    _kill(process)
                    reason = f"timed out after {exp.job_timeout:g} s (job_timeout)"
                    break
                continue
            if line is None:
                break
            output.append(line)
            log.write(line)
            log.flush()
            step = steps.read(line)
            if step is not None and on_intermediate is not None and on_intermediate(*step):
                _kill(process)
                reason = "pruned"
                break
        code = process.wait()
        final = steps.last()
        if not reason and final is not None and on_intermediate is not None:
            on_intermediate(*final)  # the last epoch's value joins the curve; the job has ended, nothing to stop
        if reason:
            log.write(f"slimkit: job stopped: {reason}\n")
    if reason == "pruned":
        return JobOutcome("pruned", reason="stopped by the pruner (intermediate values behind other trials)",
                          log_tail=log_tail(log_path))
    if reason:
        return JobOutcome("failed", reason=reason, log_tail=log_tail(log_path))
    if code != 0:
        return JobOutcome("failed", reason=f"the script exited with status {code}{_missing_module(output)}",
                          log_tail=log_tail(log_path))
    try:
        result = parse_result("".join(output))
    except ConfigError as exc:
        return JobOutcome("failed", reason=str(exc), log_tail=log_tail(log_path))
    if result is None:
        return JobOutcome("failed", reason="the script reported no result (call slimkit.print_result(metric) at the "
                          "end)", log_tail=log_tail(log_path))
    names = exp.objective_names
    if exp.multi_res_labels:
        return _split_labels(exp, result.values, result.extra, log_tail(log_path))
    if len(result.values) != len(names) and (len(names) > 1 or len(result.values) > 1):
        return JobOutcome("failed", reason=f"the script reported {len(result.values)} value(s) but the experiment "
                          f"names {len(names)} objective(s) ({', '.join(names)}); report one per objective in that "
                          "order with print_result([...])", log_tail=log_tail(log_path))
    if not all(math.isfinite(v) for v in result.values):
        return JobOutcome("failed", reason=f"the script reported {result.metric if len(names) == 1 else result.values}",
                          log_tail=log_tail(log_path))
    return JobOutcome("complete", list(result.values), extra=result.extra, log_tail=log_tail(log_path))


def _missing_module(output: list[str]) -> str:
    """``: it imports 'tensorflow', which is not installed`` when the job died of a missing package, else ''."""
    for line in reversed(output[-50:]):
        found = re.search(r"ModuleNotFoundError: No module named '([^']+)'", line)
        if found:
            return (f": it imports {found.group(1)!r}, which is not installed here (the script needs it; slimkit "
                    "runs any script, whatever it imports)")
    return ""


def _split_labels(exp: Experiment, values: list[float], extra: dict[str, Any], tail: str) -> JobOutcome:
    """``print_result([metric, *extras])`` with ``multi_res_labels``: the metric is the result, the rest are named."""
    labels = exp.multi_res_labels
    if len(values) != 1 + len(labels):
        return JobOutcome("failed", reason=f"the script reported {len(values)} value(s) but resource_args."
                          f"multi_res_labels names {len(labels)} beside the metric; report print_result([metric, "
                          f"{', '.join(labels)}])", log_tail=tail)
    if not math.isfinite(values[0]):
        return JobOutcome("failed", reason=f"the script reported {values[0]}", log_tail=tail)
    return JobOutcome("complete", values[:1], extra={**extra, **dict(zip(labels, values[1:], strict=True))},
                      log_tail=tail)


class JobTimeout(BaseException):
    """A script-free trial ran past ``job_timeout``.

    A BaseException, so no library's ``except Exception`` turns it into another error.
    """


@contextlib.contextmanager
def _time_limit(seconds: float) -> Any:
    """Raise :class:`JobTimeout` in this (main) thread after ``seconds``; no limit off the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    expired = []

    def expire(signum: int, frame: Any) -> None:
        expired.append(True)
        raise JobTimeout(f"timed out after {seconds:g} s (job_timeout)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    if expired:  # the limit passed but Python swallowed the exception (raised inside a __del__ or a gc callback)
        raise JobTimeout(f"timed out after {seconds:g} s (job_timeout)")


def _smash_and_measure(exp: Experiment, bench: Any, values: Mapping[str, Any], trial_dir: Path,
                       log: Any) -> dict[str, float]:
    from slimkit.engine import smash

    assert exp.smash_space is not None
    cfg = exp.smash_space.config(values)
    cfg.device = "cuda" if exp.resource == "gpu" else "cpu"
    cfg.add_model_defaults(bench.loaded, data=exp.data)
    log.write(f"recipe {cfg.get_active_algorithms()} {cfg.to_dict()['hyperparameters']}\n")
    started = time.perf_counter()
    model = smash(bench.base, cfg)  # no algorithm chosen: the base model, savable like the others
    log.write(f"smashed in {time.perf_counter() - started:.2f} s\n")
    measured = bench.measure(model, exp.objectives)
    log.write(f"measured {measured}\n")
    if exp.save_model:
        model.save_pretrained(trial_dir / "model")
        log.write(f"saved {trial_dir / 'model'}\n")
    return measured


def run_smash_job(exp: Experiment, bench: Any, values: Mapping[str, Any], trial_dir: Path) -> JobOutcome:
    """Smash the base model with this trial's SmashConfig, measure the objectives, save when asked.

    The trial runs in the worker process under ``job_timeout`` (a SIGALRM timer); any exception fails the trial.
    """
    trial_dir.mkdir(parents=True, exist_ok=True)
    log_path = trial_dir / "log.txt"
    with open(log_path, "w") as log, contextlib.redirect_stdout(log):
        try:
            with _time_limit(exp.job_timeout):
                measured = _smash_and_measure(exp, bench, values, trial_dir, log)
        except (Exception, JobTimeout) as exc:  # any failure of this trial is recorded; the study goes on
            log.write(traceback.format_exc())
            log.flush()
            return JobOutcome("failed", reason=f"{type(exc).__name__}: {exc}", log_tail=log_tail(log_path))
    values_out = [measured[name] for name in exp.objectives]
    bad = [n for n, v in zip(exp.objectives, values_out, strict=True) if not math.isfinite(v)]
    if bad:
        return JobOutcome("failed", reason=f"non-finite {', '.join(bad)}", log_tail=log_tail(log_path))
    return JobOutcome("complete", values_out, extra=measured, log_tail=log_tail(log_path))
