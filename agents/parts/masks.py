"""Legal-action masks of turn-based games (``SpaceInfo.action_mask``).

A masked space's observation rows end with one column per discrete action, 1.0 where the
action is legal (``envs/spaces.py`` ``encode_masked``): the mask rides inside the observation,
so the replay (n-step windows, sequences, shards) and the on-policy rollout carry it with no
column of their own, and an agent reads it back from any stored observation. Input
normalization leaves those columns as they came (``agents/normalize.py``, ``keep_last``), so a
normalized row still holds the raw mask.

A row with no legal action (the placeholder of an agent that is not to move, or a terminal
next observation) counts every action legal, as ``wheeler2.env.legal_actions`` does: nothing then
meets an empty choice, and such rows are given no weight or no bootstrap by whoever made them.
"""

from __future__ import annotations

import torch

# The numpy side (acting, warm-up and epsilon draws) is the engine's, shared with the drivers
# and the reference players.
from wheeler2.env import legal_actions as legal_actions_np
from wheeler2.env import random_legal

__all__ = ["legal_actions", "legal_actions_np", "mask_logits", "masked_argmax", "random_legal"]

MASK_USERS = "use dqn, ppo, a2c or pg"


def refuse_mask(algo: str) -> ValueError:
    """The error of an algorithm that cannot restrict its actions to the legal ones."""
    return ValueError(f"{algo} cannot honour an action mask; {MASK_USERS}")


def legal_actions(obs: torch.Tensor, act_dim: int) -> torch.Tensor:
    """``[..., act_dim]`` bool: the legal actions of masked observations ``obs [..., D]``."""
    legal = obs[..., -act_dim:] > 0.5
    return legal | ~legal.any(-1, keepdim=True)


def mask_logits(logits: torch.Tensor, legal: torch.Tensor) -> torch.Tensor:
    """Categorical logits with the illegal ones at the dtype's lowest finite value.

    Finite rather than -inf: log-softmax then gives those actions a huge negative but finite
    log-probability and exactly zero probability, and no inf - inf or 0 * inf turns an
    entropy or a gradient into NaN."""
    return logits.masked_fill(~legal, torch.finfo(logits.dtype).min)


def masked_argmax(values: torch.Tensor, legal: torch.Tensor) -> torch.Tensor:
    """The index of the largest legal value of each row (``values [..., A]``)."""
    return values.masked_fill(~legal, -torch.inf).argmax(-1)
