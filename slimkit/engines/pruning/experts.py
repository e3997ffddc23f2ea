"""Importance of the intermediate channels of each MoE expert (3-D expert weights, see speedup/experts.py).

From the weights: the L1 (``p=1``) or L2 norm of each channel's gate row, up row and down column, per expert.
From data: :class:`RoutedEnergy` hooks every experts module and, for each expert, keeps ``E[h_i^2]`` over the
tokens the router sent to it (``h = act(gate) * up``, the input of its down projection); a channel's
importance is ``E[h_i^2] * ||down[:, i]||^2``, the energy it adds to the expert's output. An expert that saw
no token falls back to its weights. The router is never changed.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from slimkit.core.devices import accumulator_dtype
from slimkit.engines.speedup.experts import experts_spec


def weight_importance(module: nn.Module, p: int) -> torch.Tensor:
    """``[experts, intermediate]``: the ``p``-norm of each channel's gate row, up row and down column."""
    spec = experts_spec(module)
    gate_up = module.gate_up_proj.detach().float()
    down = module.down_proj.detach().float()
    rows = torch.cat([gate_up[:, : spec.intermediate], gate_up[:, spec.intermediate:], down.transpose(1, 2)], dim=2)
    return rows.abs().pow(p).sum(2).pow(1.0 / p)


class RoutedEnergy:
    """Second moments of each expert's intermediate channels over the tokens routed to it."""

    def __init__(self, modules: dict[str, nn.Module]) -> None:
        self.modules = modules
        # accumulated on the experts' device (no host round trip per expert and call), read back once at the end
        devices = {n: m.gate_up_proj.device for n, m in modules.items()}
        self.sums = {n: torch.zeros(experts_spec(m).num_experts, experts_spec(m).intermediate,
                                    dtype=accumulator_dtype(devices[n]), device=devices[n]) for n, m in modules.items()}
        self.counts = {n: torch.zeros(experts_spec(m).num_experts, dtype=torch.float64) for n, m in modules.items()}
        self.handles: list[RemovableHandle] = []

    def __enter__(self) -> RoutedEnergy:
        for name, module in self.modules.items():
            self.handles.append(module.register_forward_pre_hook(self._hook(name)))
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()

    def _hook(self, name: str):  # noqa: ANN202 - a forward pre-hook
        def hook(module: nn.Module, args: tuple) -> None:
            if len(args) < 2 or not (torch.is_tensor(args[0]) and torch.is_tensor(args[1])):
                return
            x, routes = args[0].detach(), args[1]
            with torch.no_grad():
                inter = experts_spec(module).intermediate
                for e in range(self.sums[name].shape[0]):
                    tokens = (routes == e).any(dim=-1).nonzero().flatten()
                    if tokens.numel() == 0:
                        continue
                    gate_up = nn.functional.linear(x[tokens].float(), module.gate_up_proj[e].detach().float())
                    h = module.act_fn(gate_up[:, :inter]) * gate_up[:, inter:]
                    self.sums[name][e] += h.to(self.sums[name].dtype).pow(2).sum(0)
                    self.counts[name][e] += tokens.numel()
        return hook

    def importance(self, name: str) -> torch.Tensor | None:
        """``[experts, intermediate]`` routed energy (None when no token reached any expert)."""
        counts = self.counts[name]
        if not bool((counts > 0).any()):
            return None
        module = self.modules[name]
        column = module.down_proj.detach().double().pow(2).sum(1).cpu()  # ||down[e][:, i]||^2
        energy = self.sums[name].cpu().double() / counts.clamp_min(1)[:, None] * column
        fallback = weight_importance(module, 2).double().cpu()
        unseen = counts == 0
        energy[unseen] = fallback[unseen]
        return energy
