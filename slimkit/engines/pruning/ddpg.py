"""A small DDPG agent (Lillicrap et al., 2016) in plain torch, as AMC uses it: one continuous action in [0, 1].

Actor ``mu(s)`` (two hidden ReLU layers, sigmoid output) and critic ``Q(s, a)``; target copies follow them by
Polyak averaging (``tau``). Exploration adds truncated normal noise around ``mu(s)`` (kept inside [0, 1]).
Transitions go into a bounded replay buffer; :meth:`update` takes one minibatch step on both networks:
the critic toward ``r + discount * (1 - done) * Q'(s', mu'(s'))``, the actor up ``Q(s, mu(s))``.
"""

from __future__ import annotations

import copy
import random
from collections import deque
from collections.abc import Sequence

import torch
from torch import nn


def _mlp(inputs: int, hidden1: int, hidden2: int, last: nn.Module | None) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Linear(inputs, hidden1), nn.ReLU(), nn.Linear(hidden1, hidden2), nn.ReLU(),
                               nn.Linear(hidden2, 1)]
    return nn.Sequential(*layers, *([last] if last is not None else []))


class DDPGAgent:
    """Deterministic policy gradient with a replay buffer and target networks, for a 1-D action in [0, 1]."""

    def __init__(self, state_dim: int, *, hidden1: int = 300, hidden2: int = 300, lr_actor: float = 1e-4,
                 lr_critic: float = 1e-3, discount: float = 1.0, tau: float = 0.01, batch_size: int = 64,
                 replay_size: int = 2000, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.actor = _mlp(state_dim, hidden1, hidden2, nn.Sigmoid())
            self.critic = _mlp(state_dim + 1, hidden1, hidden2, None)
        self.actor_target, self.critic_target = copy.deepcopy(self.actor), copy.deepcopy(self.critic)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=lr_actor)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=lr_critic)
        self.discount, self.tau, self.batch_size = float(discount), float(tau), int(batch_size)
        self.buffer: deque[tuple[list[float], float, float, list[float], float]] = deque(maxlen=int(replay_size))

    def policy(self, state: Sequence[float]) -> float:
        """``mu(state)``, the greedy action."""
        with torch.no_grad():
            return float(self.actor(torch.tensor([list(state)], dtype=torch.float32))[0, 0])

    def explore(self, state: Sequence[float], sigma: float) -> float:
        """``mu(state)`` plus normal noise of std ``sigma``, resampled until it lies in [0, 1]."""
        mean = self.policy(state)
        for _ in range(100):
            value = self.rng.gauss(mean, sigma)
            if 0.0 <= value <= 1.0:
                return value
        return min(max(mean, 0.0), 1.0)

    def random_action(self) -> float:
        """A uniform action in [0, 1] (warm-up episodes)."""
        return self.rng.random()

    def remember(self, state: Sequence[float], action: float, reward: float, next_state: Sequence[float],
                 done: bool) -> None:
        """Store one transition."""
        self.buffer.append((list(state), float(action), float(reward), list(next_state), float(done)))

    def update(self) -> tuple[float, float] | None:
        """One minibatch step on critic and actor, then soft target updates; ``(critic loss, actor loss)``."""
        if len(self.buffer) < self.batch_size:
            return None
        batch = self.rng.sample(list(self.buffer), self.batch_size)
        s, a, r, s2, done = (torch.tensor(col, dtype=torch.float32) for col in zip(*batch, strict=True))
        a, r, done = a[:, None], r[:, None], done[:, None]
        with torch.no_grad():
            target = r + self.discount * (1 - done) * self.critic_target(torch.cat([s2, self.actor_target(s2)], 1))
        critic_loss = nn.functional.mse_loss(self.critic(torch.cat([s, a], 1)), target)
        self.critic_opt.zero_grad()
        critic_loss.backward()
        self.critic_opt.step()
        actor_loss = -self.critic(torch.cat([s, self.actor(s)], 1)).mean()
        self.actor_opt.zero_grad()
        actor_loss.backward()
        self.actor_opt.step()
        with torch.no_grad():
            for net, tgt in ((self.actor, self.actor_target), (self.critic, self.critic_target)):
                for p, q in zip(net.parameters(), tgt.parameters(), strict=True):
                    q.mul_(1 - self.tau).add_(self.tau * p)
        return critic_loss.item(), actor_loss.item()
