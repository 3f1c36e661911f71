"""Return and advantage estimates over on-policy rollouts, shared by PPO, A2C and PG.

A rollout is ``[T, N]``: T vector steps of N env copies that run on across rollouts, so an
episode may end anywhere in it (``dones``) and the last step is usually mid-episode.
``next_values[t]`` is V of the *true* next observation of step t (``Transitions.next_obs``, the
final observation where the episode ended), so:

* a terminated step does not bootstrap (``terminated`` zeroes V(s'_t));
* a truncated step (time limit) bootstraps from V of its final observation;
* every episode end (terminated or truncated) cuts the recursion, so nothing of the next
  episode leaks back;
* the last step of the rollout bootstraps from V of the observation after it.

TD(lambda) and GAE(lambda) are the same estimate seen from two sides (Sutton & Barto, ch. 12;
Schulman et al. 2016, eq. 16): with V(s'_t) = V(s_{t+1}) inside an episode,

    G^lambda_t = V(s_t) + A^GAE(gamma, lambda)_t

so PPO's value target ``gae(...) + values`` *is* the lambda-return; tests/test_td_lambda.py
checks it.
"""

from __future__ import annotations

import torch


def lambda_returns(
    rewards: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    dones: torch.Tensor,
    gamma: float,
    lam: float,
) -> torch.Tensor:
    """TD(lambda) targets, the lambda-returns G^lambda_t, over a [T, N] rollout, backwards.

    The recursive form of the forward view (Sutton & Barto eq. 12.18 with one-step bootstraps):

        G_t = r_t + gamma (1 - term_t) [(1 - lam) V(s'_t) + lam G_{t+1}]

    where G_{t+1} is replaced by V(s'_t) at an episode end (done_t) and at the rollout's last
    step. ``lam = 0`` is the one-step TD target r_t + gamma V(s'_t); ``lam = 1`` is the Monte
    Carlo return to the episode end, or the n-step return to the rollout end where the
    episode goes on (or was truncated) past it.
    """
    not_term = 1.0 - terminated.float()
    done = dones.bool()
    returns = torch.empty_like(rewards)
    carry = next_values[-1]  # G_{T}: the bootstrap after the rollout's last step
    for t in reversed(range(len(rewards))):
        nv = next_values[t]
        carry = torch.where(done[t], nv, carry)  # an episode ended at t: nothing after it counts
        carry = rewards[t] + gamma * not_term[t] * ((1.0 - lam) * nv + lam * carry)
        returns[t] = carry
    return returns


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    dones: torch.Tensor,
    gamma: float,
    lam: float,
) -> torch.Tensor:
    """Generalized advantage estimates over a [T, N] rollout.

    ``next_values[t]`` is V of the true next observation of step t, so a truncated step
    bootstraps from its final observation; ``terminated`` cuts the bootstrap, ``dones``
    (terminated or truncated) cuts the recursion so no advantage leaks into the next episode.

        delta_t = r_t + gamma (1 - term_t) V(s'_t) - V(s_t)
        A_t     = delta_t + gamma lam (1 - done_t) A_{t+1}

    ``A + values`` is :func:`lambda_returns` (see the module docstring).
    """
    not_term = 1.0 - terminated.float()
    not_done = 1.0 - dones.float()
    deltas = rewards + gamma * not_term * next_values - values
    adv = torch.empty_like(deltas)
    last = torch.zeros_like(deltas[0])
    for t in reversed(range(len(deltas))):
        last = deltas[t] + gamma * lam * not_done[t] * last
        adv[t] = last
    return adv
