"""The `slimkit` command line: smash a model and measure it, list algorithms and zoo models."""

from __future__ import annotations

import argparse
import json
import re
import sys
import traceback
from pathlib import Path
from typing import Any

from slimkit.errors import (
    ConfigError,
    DataError,
    MissingComponentError,
    MissingPackageError,
    ModelNotSupportedError,
    SlimkitError,
)

#: Errors in what the user asked for (exit status 2, like argparse's usage errors); others are failures (1).
USAGE_ERRORS = (ConfigError, DataError, MissingComponentError, ModelNotSupportedError)

EPILOG = """examples:
  slimkit smash                                   # MiniLM + int8_dynamic, table, save to ./smashed/minilm
  slimkit smash --model digits_cnn --algorithm l1_filter --set l1_filter_sparsity=0.5
  slimkit smash --model digits_cnn --algorithm qat          # trains on the model's own data (Digits)
  slimkit smash --model digits_cnn --algorithm agp --data Digits
  slimkit smash --config my_config.json --output out/
  slimkit smash --model smollm2-135m --algorithm gptq --format compressed-tensors   # opens in transformers, vLLM
  slimkit smash --model ct_folder/ --algorithm llama_cpp   # a compressed-tensors/GPTQ checkpoint -> GGUF
  slimkit smash --model ./Llama-3-8B --algorithm gptq --output out/   # streams block by block when it is large
  slimkit algorithms --group quantizer
  slimkit zoo
  slimkit run experiment.json                     # one job with the file's fixed values
  slimkit run experiment.json --automatic         # search the file's ranges on Optuna (resumes when rerun)
  slimkit worker experiment.json --storage postgresql://me@db-host/studies   # one per machine, one shared study
  slimkit report runs/<experiment name>           # reprint its table, rewrite CSV/JSON/plots
  slimkit serve smashed/minilm --port 8000        # HTTP: POST /embed /predict /generate, GET /health /metrics
"""


#: Python phrasings in slimkit's errors -> what the same fix is on the command line.
_SHELL_PHRASES: list[tuple[str, str]] = [
    (r"cfg\.add_data\((['\"])([A-Za-z0-9_]+)\1\)", r"`--data \2`"),
    (r"cfg\.add_data\([^)]*\)", "`--data NAME` (e.g. --data Digits; `slimkit zoo` models bring their own)"),
    (r"cfg\.add_example_inputs\([^)]*\)", "`--example-inputs FILE.safetensors`"),
    (r"cfg\.add_tokenizer\([^)]*\)", "`--tokenizer FOLDER`"),
    (r"cfg\.add_processor\([^)]*\)", "a model with its processor"),
    (r"(?:set )?cfg\[(['\"])([a-z0-9_]+)\1\] = (['\"]?)([^\s,;)'\"]+)\3", r"`--set \2=\4`"),
    (r"leave cfg\[(['\"])([a-z0-9_]+)\1\] empty", r"leave out `--set \2=...`"),
    (r"cfg\[(['\"])([a-z0-9_]+)\1\]", r"`--set \2=...`"),  # a key named without a value
    (r"(?:set )?cfg\.device = (['\"])?([a-z0-9:]+)\1?", r"`--device \2`"),
    (r" before smash\(\)", ""),
    (r"\bCall `", "Add `"),
    (r"\bcall `", "add `"),
]


def shell_message(message: str) -> str:
    """Rephrase an error for the command line: the flags that fix it instead of the Python calls."""
    for pattern, replacement in _SHELL_PHRASES:
        message = re.sub(pattern, replacement, message)
    return message


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _build_config(args: argparse.Namespace):
    from slimkit.config.smash_config import SmashConfig

    if args.config:
        cfg = SmashConfig.from_json(args.config)
    elif args.algorithm:
        cfg = SmashConfig(args.algorithm, device=args.device)
    else:
        cfg = None
    for item in args.set or []:
        if "=" not in item:
            raise SlimkitError(f"--set expects key=value, got {item!r} (e.g. --set int8_dynamic_per_channel=false).")
        if cfg is None:
            from slimkit.demo import DEFAULT_RECIPES

            cfg = SmashConfig(DEFAULT_RECIPES.get(args.model, {}), device=args.device)
        key, value = item.split("=", 1)
        cfg[key] = _parse_value(value)
    if cfg is not None and args.device:
        cfg.device = args.device
    if cfg is not None and args.tokenizer:
        cfg.add_tokenizer(args.tokenizer)
    if cfg is not None and args.example_inputs:
        from slimkit.config.files import load_inputs

        cfg.add_example_inputs(load_inputs(args.example_inputs))
    return cfg


def _cmd_smash(args: argparse.Namespace) -> int:
    from slimkit import demo

    default_name = Path(str(args.model).rstrip("/")).name.replace(":", "_") or "model"
    output = None if args.no_save else (args.output or f"smashed/{default_name}")
    return demo.run(args.model, _build_config(args), output, threads=args.threads, repeats=args.repeats,
                    warmup=args.warmup, data=args.data, save_format=args.format, dtype=args.dtype, stream=args.stream,
                    memory_budget=args.memory_budget, overwrite=args.overwrite)


def _cmd_algorithms(args: argparse.Namespace) -> int:
    from slimkit.algorithms.docs import algorithms_markdown
    from slimkit.core import registry
    from slimkit.core.groups import GROUPS

    if args.markdown:
        sys.stdout.write(algorithms_markdown())
        return 0
    names = [n for g in GROUPS for n in registry.by_group(g) if not args.group or g == args.group]
    infos = [registry.info(n) for n in names]
    if args.json:
        print(json.dumps(infos, indent=2))
        return 0
    for i in infos:
        needs = ", ".join(i["requires"]) or "-"
        print(f"{i['name']}  [{i['group']}]  devices: {', '.join(i['devices'])}  needs: {needs}")
        if i["aliases"]:
            print(f"    also named: {', '.join(i['aliases'])}")
        print(f"    {i['description']}")
        for hp in i["hyperparameters"]:
            print(f"    {hp['name']} = {hp['default']!r}  ({hp['allowed']}): {hp['desc']}")
        print()
    return 0


def _cmd_zoo(args: argparse.Namespace) -> int:
    from slimkit import zoo

    print("\n".join(zoo.names()))
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from slimkit.experiment.runner import run_experiment

    result = run_experiment(args.experiment, automatic=args.automatic, folder=args.output, storage=args.storage,
                            heartbeat_interval=args.heartbeat_interval, worker=args.command == "worker")
    return 0 if result.counts().get("complete", 0) else 1


def _cmd_report(args: argparse.Namespace) -> int:
    from slimkit.experiment.runner import report_experiment

    report_experiment(args.folder, storage=args.storage)
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    try:
        from slimkit.serve import serve
    except ImportError as exc:
        raise MissingPackageError(f"slimkit serve needs a package that is not installed ({exc}). "
                                  "Install it: pip install 'slimkit[serve]'") from exc
    serve(args.folder, host=args.host, port=args.port, max_length=args.max_length, max_inputs=args.max_inputs,
          max_new_tokens=args.max_new_tokens, access_log=args.access_log)
    return 0


def _experiment_flags(p: argparse.ArgumentParser, output_help: str) -> None:
    """The experiment file, ``--output`` and the shared-study flags of ``run`` and ``worker``."""
    p.add_argument("experiment", metavar="EXPERIMENT", help="the experiment file (.json, .yaml)")
    p.add_argument("--output", metavar="DIR", help=f"{output_help} (default <workingdir>/runs/<name>)")
    p.add_argument("--storage", metavar="URL", help="a database URL several machines share (postgresql://USER:PW@"
                                                    "HOST:PORT/DB); default the file's \"storage\", else the "
                                                    "journal file in the experiment folder")
    p.add_argument("--heartbeat-interval", type=int, default=10, metavar="S",
                   help="with --storage: seconds between a running trial's heartbeats; a trial silent for 3x this "
                        "is failed and run again (default 10)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    from slimkit.core.groups import GROUPS
    from slimkit.zoo import DEFAULT_MODEL

    parser = argparse.ArgumentParser(
        prog="slimkit",
        description="Make PyTorch models smaller and faster, offline, with honest before/after measurements.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("smash", help="smash a zoo model, print a before/after table, save and verify the reload",
                       description="Smash a model from slimkit's offline zoo with a recipe, compare it with the "
                                   "original (size, parameters, MACs, latency, fidelity, task metric), save it, "
                                   "reload it and check the reloaded outputs match. With no arguments: the real "
                                   "MiniLM sentence encoder with dynamic int8.")
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help=f"a zoo model name (default {DEFAULT_MODEL}; see `slimkit zoo`), a local Hugging Face "
                        "folder (config.json + safetensors), or package.module:factory returning a torch module "
                        "(or a (module, example_inputs) pair)")
    p.add_argument("--algorithm", action="append", metavar="NAME",
                   help="algorithm to apply (repeatable); default: the model's built-in recipe")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="set a prefixed hyperparameter, value parsed as JSON (e.g. int8_dynamic_per_channel=false)")
    p.add_argument("--config", metavar="PATH", help="a smash_config.json (or its folder) to use as the recipe")
    p.add_argument("--data", metavar="NAME",
                   help="dataset for algorithms that train or calibrate (a `slimkit.data` id such as Digits or "
                        "PyDocText); default: the zoo model's own offline data when an algorithm needs one")
    p.add_argument("--example-inputs", metavar="FILE",
                   help="a safetensors file of example inputs (default: the zoo model's own)")
    p.add_argument("--tokenizer", metavar="FOLDER", help="a local tokenizer folder (default: the zoo model's own)")
    p.add_argument("--output", metavar="DIR", help="where to save (default ./smashed/<model>)")
    p.add_argument("--no-save", action="store_true", help="measure only; do not save and reload")
    p.add_argument("--format", default="slimkit", choices=["slimkit", "compressed-tensors", "gptq"],
                   help="how to save: slimkit's own folder (default), or a Hugging Face checkpoint transformers / "
                        "vLLM open: compressed-tensors (pack-quantized) or gptq; needs rtn, gptq or awq at 4/8 bits")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N (default: cpu for the built-in recipes)")
    p.add_argument("--threads", type=int, default=2, help="torch threads while timing (default 2)")
    p.add_argument("--repeats", type=int, default=10, help="timed forward passes per model (default 10)")
    p.add_argument("--warmup", type=int, default=3, help="untimed warm-up passes per model (default 3)")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default=None,
                   help="dtype of a model folder's weights (default: as stored); bf16/fp16 models are calibrated in "
                        "float32 on the CPU and saved in this dtype")
    stream = p.add_mutually_exclusive_group()
    stream.add_argument("--stream", dest="stream", action="store_true", default=None,
                        help="quantize a model folder block by block from its safetensors shards (memory: the "
                             "largest block, not the model; resumable). Default: when it would not fit comfortably")
    stream.add_argument("--no-stream", dest="stream", action="store_false", help="load the whole model in memory")
    p.add_argument("--memory-budget", metavar="SIZE", default=None,
                   help="streaming: memory the run may use, e.g. 6GB (refused when one block does not fit; the rest "
                        "holds calibration inputs before they spill to disk)")
    p.add_argument("--overwrite", action="store_true",
                   help="streaming: replace an earlier save of another model or config in --output")
    p.set_defaults(func=_cmd_smash)

    p = sub.add_parser("algorithms", help="list algorithms with groups, devices, requirements and hyperparameters")
    p.add_argument("--group", choices=GROUPS, help="only this group")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--markdown", action="store_true", help="print the docs/algorithms.md page")
    p.set_defaults(func=_cmd_algorithms)

    p = sub.add_parser("zoo", help="list the offline models `--model` accepts")
    p.set_defaults(func=_cmd_zoo)

    p = sub.add_parser("run", help="run an experiment file: one job, or with --automatic a search on Optuna",
                       description="Run an Auptimizer-style experiment file (JSON or YAML). Without --automatic: one "
                                   "job with the file's fixed values. With --automatic: n_samples trials proposed by "
                                   "the proposer (random, grid, tpe, cmaes, nsga2, hyperband, bohb, spearmint) in "
                                   "n_parallel worker processes; "
                                   "rerunning the same command resumes the study. Results: a table, results.csv, "
                                   "results.json and PNG plots in the experiment folder.")
    p.add_argument("--automatic", action="store_true", help="search the ranges in the file (default: one job)")
    _experiment_flags(p, "experiment folder")
    p.set_defaults(func=_cmd_run, automatic=False)

    p = sub.add_parser("worker", help="join an experiment's search in a shared database (one per machine)",
                       description="Run an experiment's automatic search as one of many workers sharing one study "
                                   "in a database (Optuna's RDB storage): start `slimkit worker exp.json --storage "
                                   "postgresql://USER@HOST/DB` on each machine. Each runs n_parallel trials at a "
                                   "time; a dead worker's trial is failed after its heartbeats stop and run again. "
                                   "All stop when n_samples trials have finished.")
    _experiment_flags(p, "this machine's folder for trial logs and models")
    p.set_defaults(func=_cmd_run, automatic=True)

    p = sub.add_parser("report", help="reprint an experiment's results and rewrite its CSV, JSON and plots")
    p.add_argument("folder", metavar="FOLDER", help="the experiment folder `slimkit run` printed")
    p.add_argument("--storage", metavar="URL", help="the study's database URL with its password, when the "
                                                    "folder's run.json records it without")
    p.set_defaults(func=_cmd_report)

    p = sub.add_parser("serve", help="serve a saved model over HTTP: /embed, /predict, /generate, /health, /metrics",
                       description="Load a model saved by `slimkit smash` (with its batcher and cacher) and answer "
                                   'POST /embed and /predict with JSON {"inputs": [...]} (strings when the save has '
                                   "a tokenizer, else token-id lists), POST /generate for causal LMs "
                                   '({"inputs": [...], "max_new_tokens": n, "stream": true|false}, greedy); '
                                   "GET /health and /metrics. Requests during loading get 503 with Retry-After; "
                                   "Ctrl-C / SIGTERM finish the requests in flight first.")
    p.add_argument("folder", metavar="DIR", help="the saved model's folder")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    p.add_argument("--max-length", type=int, default=None,
                   help="longest input in tokens (default: the model's max_position_embeddings)")
    p.add_argument("--max-inputs", type=int, default=256, help="most inputs in one request (default 256)")
    p.add_argument("--max-new-tokens", type=int, default=512,
                   help="largest max_new_tokens a /generate request may ask for (default 512)")
    p.add_argument("--access-log", action="store_true",
                   help="log every request (uvicorn's access log; off by default: it costs CPU per request)")
    p.set_defaults(func=_cmd_serve)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `slimkit` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except SlimkitError as exc:
        if getattr(args, "debug", False):
            traceback.print_exc()
        print(f"slimkit: error: {shell_message(str(exc))}", file=sys.stderr)
        return 2 if isinstance(exc, USAGE_ERRORS) else 1


if __name__ == "__main__":
    sys.exit(main())
