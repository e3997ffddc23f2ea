"""Turn a plain Python function into an experiment's job script (Auptimizer's ``aup.convert``).

Auptimizer's ``experiment_auto.json`` names a ``script`` that does not exist yet: it is generated from a plain
module holding the function to optimise (``python -m aup.convert origin.py experiment_auto.json func``). slimkit's
equivalent::

    python -m slimkit.faces.auptimizer.convert origin.py experiment_auto.json rosenbrock [-o out.py]

writes the experiment's ``script`` (relative to its ``workingdir``, else ``-o``): the original source unchanged,
then a job entry point that loads the job config (``BasicConfig().load(sys.argv[1])``), calls the function with
each ``parameter_config`` name as a keyword argument and reports its return value with ``print_result``. The
function is checked before anything is written: it must be defined at the top level of the module, accept every
parameter name, and the module must not already run something of its own under ``if __name__ == "__main__":``.
"""

from __future__ import annotations

import argparse
import ast
import os
import stat
import sys
from collections.abc import Sequence
from pathlib import Path

from slimkit.errors import ConfigError
from slimkit.experiment.files import read_mapping
from slimkit.experiment.space import ranked

ENTRY = '''

# --- job entry point written by slimkit's convert (the experiment's parameter_config as keyword arguments) ---
import sys as _sys  # noqa: E402

from slimkit import BasicConfig as _BasicConfig  # noqa: E402
from slimkit import print_result as _print_result  # noqa: E402


def _slimkit_job(config):
    _print_result({call})


if __name__ == "__main__":
    if len(_sys.argv) != 2:
        _sys.exit("usage: python " + _sys.argv[0] + " JOB_CONFIG.json (slimkit run writes it for each job)")
    _slimkit_job(_BasicConfig().load(_sys.argv[1]))
'''


def _parameter_names(experiment: dict, path: Path) -> list[str]:
    params = experiment.get("parameter_config")
    if not isinstance(params, list) or not params:
        raise ConfigError(f"{path}: parameter_config: a non-empty list of {{name, range, type}} is needed to know the "
                          f"function's arguments; got {params!r}.")
    names = [p.get("name") if isinstance(p, dict) else None for p in params]
    for i, name in enumerate(names):
        if not isinstance(name, str) or not name.isidentifier():
            raise ConfigError(f"{path}: parameter_config[{i}].name: a Python identifier (it becomes a keyword "
                              f"argument of the function); got {name!r}.")
    return names


def _check_function(tree: ast.Module, source: Path, func_name: str, names: list[str]) -> None:
    functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if func_name not in functions:
        near = ", ".join(ranked(func_name, sorted(functions))) or "none"
        raise ConfigError(f"{source}: no top-level function {func_name!r}; functions defined there (closest first): "
                          f"{near}.")
    func = functions[func_name]
    if isinstance(func, ast.AsyncFunctionDef):
        raise ConfigError(f"{source}: {func_name!r} is a coroutine (async def); the job calls a plain function.")
    args = func.args
    accepted = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)} - {a.arg for a in args.posonlyargs}
    missing = [n for n in names if n not in accepted]
    if missing and args.kwarg is None:
        raise ConfigError(f"{source}: {func_name}() does not accept {', '.join(map(repr, missing))} (the experiment's "
                          f"parameter_config names, passed as keyword arguments); it accepts: "
                          f"{', '.join(sorted(accepted)) or 'nothing'}.")
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) and "__name__" in ast.unparse(node.test):
            raise ConfigError(f"{source}: line {node.lineno} already has an `if __name__ == \"__main__\":` block, "
                              "which would run in every job before the function; convert a copy without it.")


def convert_script(source: str | os.PathLike, experiment: str | os.PathLike, func_name: str,
                   output: str | os.PathLike | None = None) -> Path:
    """Write the job script of ``experiment`` that runs ``func_name`` from ``source``; return its path.

    ``output`` defaults to the experiment's ``script`` in its ``workingdir`` (both relative to the experiment
    file's folder). Nothing is written when a check fails (:class:`~slimkit.errors.ConfigError` says which).
    """
    source, exp_path = Path(source), Path(experiment)
    if not source.is_file():
        raise ConfigError(f"The script to convert, {str(source)!r}, does not exist; give the Python file that "
                          "defines the function.")
    raw = read_mapping(exp_path, "experiment")
    names = _parameter_names(raw, exp_path)
    text = source.read_text(encoding="utf-8")
    try:
        tree = ast.parse(text, filename=str(source))
    except SyntaxError as exc:
        raise ConfigError(f"{source}: not valid Python ({exc.msg}, line {exc.lineno}).") from exc
    _check_function(tree, source, func_name, names)
    if output is None:
        script = raw.get("script")
        if not isinstance(script, str) or not script:
            raise ConfigError(f"{exp_path}: script: missing; it names the file to write (or give -o/--output).")
        workingdir = raw.get("workingdir", ".")
        output = exp_path.resolve().parent / (workingdir if isinstance(workingdir, str) else ".") / script
    out = Path(output)
    if out.resolve() == source.resolve():
        raise ConfigError(f"{out}: the output would overwrite the script being converted; give another -o/--output.")
    call = f"{func_name}(" + ", ".join(f"{n}=config[{n!r}]" for n in names) + ")"
    shebang = "" if text.startswith("#!") else "#!/usr/bin/env python3\n"
    body = shebang + text.rstrip("\n") + "\n" + ENTRY.format(call=call)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(body, encoding="utf-8")
    tmp.chmod(tmp.stat().st_mode | stat.S_IXUSR | stat.S_IRUSR | stat.S_IWUSR)
    os.replace(tmp, out)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m slimkit.faces.auptimizer.convert SCRIPT EXPERIMENT FUNC [-o OUTPUT]``; 0 on success, 2 on error."""
    parser = argparse.ArgumentParser(prog="python -m slimkit.faces.auptimizer.convert",
                                     description="Write an experiment's job script that runs FUNC from SCRIPT with "
                                                 "the parameter_config values (Auptimizer's aup.convert).")
    parser.add_argument("script", help="the Python file that defines the function")
    parser.add_argument("experiment", help="the experiment file (its parameter_config names the arguments)")
    parser.add_argument("func_name", help="the function to optimise; its return value is the job's result")
    parser.add_argument("-o", "--output", default=None, help="where to write (default: the experiment's script)")
    args = parser.parse_args(argv)
    try:
        out = convert_script(args.script, args.experiment, args.func_name, args.output)
    except ConfigError as exc:
        print(f"slimkit convert: {exc}", file=sys.stderr)
        return 2
    print(f"slimkit convert: wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
