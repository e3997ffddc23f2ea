"""GPTQ's inverse-Hessian factor: torch's factorisations against slimkit's in-place LAPACK, time and memory.

    .venv/bin/python benchmarks/gptq_factor.py [--sizes 2048 4096 8192 14336] [--threads 2] [--repeats 1]
        [--baseline REV [--rows 1024]]

For each width ``n`` (4096 is a Llama-3-8B attention/MLP input, 14336 its ``down_proj`` input) a damped Hessian
``2/m X^T X`` of random inputs is factorised into ``U = chol(H^-1)^T`` both ways, interleaved, each in a fresh copy:
``torch`` (what GPTQ runs on CUDA: one ``cholesky_ex`` of the reversed ``H`` and one triangular solve into an
identity, in place: two ``[n, n]`` matrices alive at once) and
``in place`` (what GPTQ runs on the CPU: LAPACK ``potrf``/``potri``/``potrf`` inside ``H``'s own memory). The table
shows the median seconds, the speed ratio, the largest difference between the two factors relative to the factor's
largest entry, and each method's peak memory above its input, in Hessians (the process's VmHWM, reset through
``/proc/self/clear_refs`` before each call; Linux only).

``--baseline REV`` also runs ``lowbit/gptq.py`` as it was at git revision ``REV`` in the same process, interleaved
with today's: its in-place factor (a column "in place @REV") and, in a second table, the whole ``quantize_gptq`` of a
``--rows x n`` layer (4-bit, groups of 128, symmetric, static act order, no clipping search: the factor plus the
column loop) both ways, with the share of equal codes.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch  # noqa: E402
from common import machine_line, print_table  # noqa: E402

from slimkit.engines.quantization.lowbit import gptq  # noqa: E402

STATUS = Path("/proc/self/status")


def _kb(field: str) -> int:
    return int(re.search(rf"^{field}:\s+(\d+) kB", STATUS.read_text(), re.M).group(1)) * 1024


def measure(fn, h: torch.Tensor) -> tuple[float, int, torch.Tensor]:
    """Seconds, peak bytes above the resident set before the call (a fresh copy of ``h`` already in it), the factor."""
    box = [h.clone()]  # handed over: the method frees it when it can
    Path("/proc/self/clear_refs").write_text("5")
    before = _kb("VmRSS")
    start = time.perf_counter()
    factor = fn(box)
    return time.perf_counter() - start, _kb("VmHWM") - before, factor


def baseline_module(rev: str):
    """``lowbit/gptq.py`` at git revision ``rev``, imported under another name (its imports are today's modules)."""
    root = Path(__file__).resolve().parents[1]
    source = subprocess.run(["git", "show", f"{rev}:slimkit/engines/quantization/lowbit/gptq.py"], cwd=root,
                            capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp(prefix="gptq_baseline_")) / "gptq_baseline.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("gptq_baseline", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def layer_table(sizes: list[int], rows: int, repeats: int, old, rev: str) -> None:
    """Whole-layer quantize_gptq today and at ``rev``, interleaved: median seconds and the share of equal codes."""
    table = []
    for n in sizes:
        gen = torch.Generator().manual_seed(n)
        w, x = torch.randn(rows, n, generator=gen), torch.randn(2 * n, n, generator=gen)
        h = (2 * x.t() @ x / x.shape[0]).contiguous()
        del x
        arms = {"today": gptq.quantize_gptq, rev: old.quantize_gptq}
        times: dict[str, list[float]] = {k: [] for k in arms}
        codes = {}
        for r in range(repeats):
            for name in list(arms) if r % 2 == 0 else list(reversed(arms)):
                start = time.perf_counter()
                codes[name] = arms[name](w, h, 4, 128, sym=True, act_order=True, clip_search=False)[0]
                times[name].append(time.perf_counter() - start)
        t_new, t_old = statistics.median(times["today"]), statistics.median(times[rev])
        same = float((codes["today"] == codes[rev]).float().mean())
        table.append([f"{rows} x {n}", f"{t_old:.2f}", f"{t_new:.2f}", f"{t_old / t_new:.2f}x", f"{same:.4f}"])
        print(" | ".join(table[-1]), flush=True)
    print_table(["layer", f"{rev} s", "today s", "speed-up", "equal codes"], table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096, 8192, 14336])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--baseline", default=None, help="git revision whose gptq.py runs beside today's")
    parser.add_argument("--rows", type=int, default=1024, help="output rows of the --baseline layer table")
    args = parser.parse_args()
    old = baseline_module(args.baseline) if args.baseline else None
    torch.set_num_threads(args.threads)
    print(machine_line(args.threads))
    methods = {"torch": lambda box: gptq._inverse_cholesky_torch(box, 0.01),
               "in place": lambda box: gptq._inverse_cholesky(box, 0.01)}
    if old is not None:
        methods[f"in place @{args.baseline}"] = lambda box: old._inverse_cholesky(box, 0.01)
    for fn in methods.values():  # warm-up: imports, LAPACK and thread pools set up outside the timings
        fn([torch.eye(64) * 2])
    rows = []
    for n in args.sizes:
        x = torch.randn(2 * n, n, generator=torch.Generator().manual_seed(n))
        h = (2 * x.t() @ x / x.shape[0]).contiguous()
        del x
        times: dict[str, list[float]] = {m: [] for m in methods}
        peaks: dict[str, int] = dict.fromkeys(methods, 0)
        factors: dict[str, torch.Tensor] = {}
        for _ in range(args.repeats):
            factors.clear()  # the previous repeat's factors are not counted in the next peaks
            for name, fn in list(methods.items())[:: 1 if len(times["torch"]) % 2 == 0 else -1]:  # alternating
                seconds, peak, factors[name] = measure(fn, h)
                times[name].append(seconds)
                peaks[name] = max(peaks[name], peak)
        t_torch, t_place = statistics.median(times["torch"]), statistics.median(times["in place"])
        diff = float((factors["torch"] - factors["in place"]).abs().max()) / float(factors["torch"].abs().max())
        del factors
        hsize = n * n * 4
        rows.append([str(n), f"{hsize / 1e6:.0f}", f"{t_torch:.2f}", f"{t_place:.2f}", f"{t_torch / t_place:.1f}x",
                     f"{peaks['torch'] / hsize:.2f}", f"{peaks['in place'] / hsize:.2f}", f"{diff:.1e}"]
                    + [f"{statistics.median(times[k]):.2f} ({peaks[k] / hsize:.2f})" for k in list(methods)[2:]])
        print(" | ".join(rows[-1]), flush=True)
    print_table(["n", "H MB", "torch s", "in place s", "speed-up", "torch peak / H", "in place peak / H",
                 "max |diff| / max |U|"] + [f"{k} s (peak / H)" for k in list(methods)[2:]], rows)
    if old is not None:
        layer_table(args.sizes, args.rows, args.repeats, old, args.baseline)


if __name__ == "__main__":
    main()
