"""step_cache (DeepCache) on a small diffusers UNet2DModel trained here on digits: speed and closeness vs uncached.

    .venv/bin/python benchmarks/step_cache_unet.py [--train-steps 300] [--sample-steps 50] [--repeats 3]

A UNet2DModel (3 levels, 32/64/64 channels, attention in the middle level) is trained as a DDPM for
``--train-steps`` steps on sklearn's 8x8 digits upsampled to 16x16 (offline, ~1,800 images), so that its features
are those of a real denoiser (a random-weight UNet has no step-to-step redundancy to reuse). Then a batch of 16
samples is drawn with DDIM (``--sample-steps`` steps, the same starting noise) by the plain UNet and by the
UNet smashed with step_cache at several intervals; sampling time is interleaved across the models (A B C ... then
reversed). Closeness: relative L2 error and cosine of the final samples against the uncached ones, and the mean
relative error of the noise predictions on cached steps.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from diffusers import DDIMScheduler, DDPMScheduler, UNet2DModel
from sklearn.datasets import load_digits

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_line, print_table  # noqa: E402

from slimkit import SmashConfig, smash  # noqa: E402


def train(steps: int) -> UNet2DModel:
    torch.manual_seed(0)
    images = torch.tensor(load_digits().images, dtype=torch.float32).unsqueeze(1) / 8 - 1
    images = F.interpolate(images, size=16, mode="bilinear", align_corners=False)
    unet = UNet2DModel(sample_size=16, in_channels=1, out_channels=1, layers_per_block=1,
                       block_out_channels=(32, 64, 64), norm_num_groups=8,
                       down_block_types=("DownBlock2D", "AttnDownBlock2D", "DownBlock2D"),
                       up_block_types=("UpBlock2D", "AttnUpBlock2D", "UpBlock2D"))
    noise_sched = DDPMScheduler(num_train_timesteps=1000)
    opt = torch.optim.AdamW(unet.parameters(), lr=2e-3)
    start = time.perf_counter()
    for step in range(steps):
        x0 = images[torch.randint(len(images), (64,))]
        noise, t = torch.randn_like(x0), torch.randint(0, 1000, (64,))
        loss = F.mse_loss(unet(noise_sched.add_noise(x0, noise, t), t).sample, noise)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            print(f"  train step {step}: loss {loss.item():.4f} ({time.perf_counter() - start:.0f} s)", flush=True)
    return unet.eval()


def sample(unet: torch.nn.Module, steps: int, reference: torch.nn.Module | None = None) -> tuple[torch.Tensor, list]:
    """DDIM samples from fixed noise; with ``reference``, also the relative error of each step's noise prediction."""
    sched = DDIMScheduler(num_train_timesteps=1000)
    sched.set_timesteps(steps)
    x = torch.randn(16, 1, 16, 16, generator=torch.Generator().manual_seed(1))
    errors = []
    with torch.inference_mode():
        for t in sched.timesteps:
            eps = unet(x, t).sample
            if reference is not None:
                ref = reference(x, t).sample
                errors.append(float((eps - ref).norm() / ref.norm()))
            x = sched.step(eps, t, x).prev_sample
    return x, errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-steps", type=int, default=300)
    parser.add_argument("--sample-steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--intervals", type=int, nargs="+", default=[2, 3, 5])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    unet = train(args.train_steps)
    models = {"uncached": unet}
    for interval in args.intervals:
        cfg = SmashConfig({"step_cache": {"interval": interval}}, device="cpu")
        models[f"step_cache interval {interval}"] = smash(copy.deepcopy(unet), cfg, verbose=False)
    reference, _ = sample(unet, args.sample_steps)
    times: dict[str, list[float]] = {name: [] for name in models}
    for r in range(args.repeats + 1):  # the first round warms up and is not timed
        for name, model in models.items() if r % 2 == 0 else reversed(models.items()):
            start = time.perf_counter()
            sample(model, args.sample_steps)
            if r:
                times[name].append(time.perf_counter() - start)
    rows = []
    base_s = statistics.median(times["uncached"])
    for name, model in models.items():
        out, errors = sample(model, args.sample_steps, reference=unet if name != "uncached" else None)
        rel = float((out - reference).norm() / reference.norm())
        cos = float(F.cosine_similarity(out.flatten(), reference.flatten(), dim=0))
        cached_errors = [e for e in errors if e > 0]
        seconds = statistics.median(times[name])
        rows.append([name, f"{seconds:.2f}", f"{base_s / seconds:.2f}x", f"{rel:.4f}", f"{cos:.5f}",
                     f"{statistics.mean(cached_errors):.4f}" if cached_errors else "-"])
    print(f"\nUNet2DModel ({sum(p.numel() for p in unet.parameters()) / 1e6:.2f}M params) trained {args.train_steps} "
          f"steps on digits 16x16; DDIM {args.sample_steps} steps, batch 16, median of {args.repeats} interleaved "
          f"runs\n{machine_line(args.threads)}\n")
    print_table(["model", "sampling (s)", "speed-up", "final rel. L2 err", "final cosine", "eps rel. err (cached)"],
                rows)


if __name__ == "__main__":
    main()
