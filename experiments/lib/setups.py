"""Setups more than one script runs, kept in one place so the scripts agree on them.

* :func:`recurrent_ppo_zoo_kwargs`: rl-zoo's ``ppo_lstm.yml`` values for CartPoleNoVel-v1 as
  sb3-contrib's RecurrentPPO takes them (``recurrent_ppo_vs_sb3`` learns with them,
  ``rppo_update_vs_sb3`` compares one update under them);
* the DDPG learner benchmark's shapes and its SB3 arm (``bench_learner``, ``learner_ceiling``);
* :func:`reacher_head_returns`: the final actor of a Reacher-v5 run on the env reward and on
  each of its reward heads (``reacher_heads``, ``detached_heads``).

Heavy imports (torch, SB3, the engine) happen inside the functions.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

# -- the DDPG learner step, both sides (bench_learner.py, learner_ceiling.py) --------------------
BATCH, HIDDEN, FILL, CAPACITY = 256, [256, 256], 100_000, 200_000
SHAPES = {"pendulum": (3, 1), "halfcheetah": (17, 6)}


def sb3_ddpg_train(obs_dim: int, act_dim: int) -> Callable[[int], None]:
    """``f(n)``: SB3's ``DDPG.train(gradient_steps=n)`` on a uniform buffer of FILL random
    transitions; batch 256, hidden [256, 256], Adam 1e-3, tau 0.005, gamma 0.99."""
    import gymnasium as gym
    from stable_baselines3 import DDPG as SB3DDPG
    from stable_baselines3.common.logger import configure

    class Shapes(gym.Env):
        observation_space = gym.spaces.Box(-1.0, 1.0, (obs_dim,), np.float32)
        action_space = gym.spaces.Box(-1.0, 1.0, (act_dim,), np.float32)

    model = SB3DDPG(
        "MlpPolicy",
        Shapes(),
        buffer_size=CAPACITY,
        batch_size=BATCH,
        learning_rate=1e-3,
        tau=0.005,
        gamma=0.99,
        policy_kwargs={"net_arch": HIDDEN},
        device="cpu",
        seed=0,
    )
    model.set_logger(configure(folder=None, format_strings=[]))
    rb, rng = model.replay_buffer, np.random.default_rng(0)
    rb.observations[:FILL] = rng.standard_normal((FILL, 1, obs_dim))
    rb.next_observations[:FILL] = rng.standard_normal((FILL, 1, obs_dim))
    rb.actions[:FILL] = rng.uniform(-1, 1, (FILL, 1, act_dim))
    rb.rewards[:FILL] = rng.standard_normal((FILL, 1))
    rb.pos = FILL

    def run(steps: int) -> None:
        model.train(gradient_steps=steps, batch_size=BATCH)

    return run


# -- recurrent PPO on CartPoleNoVel-v1 (recurrent_ppo_vs_sb3.py, rppo_update_vs_sb3.py) ---------


def recurrent_ppo_zoo_kwargs() -> dict[str, Any]:
    """rl-zoo's ppo_lstm.yml values for CartPoleNoVel-v1, as RecurrentPPO's keyword arguments."""
    import torch

    def linear(start: float) -> Any:
        return lambda progress: progress * start

    return dict(
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=linear(1e-3),
        clip_range=linear(0.2),
        policy_kwargs=dict(
            ortho_init=False,
            activation_fn=torch.nn.ReLU,
            lstm_hidden_size=64,
            enable_critic_lstm=True,
            net_arch=dict(pi=[64], vf=[64]),
        ),
    )


# -- Reacher-v5's heads (reacher_heads.py, detached_heads.py) ------------------------------------
REACHER_EVAL_EPISODES = 20


def reacher_head_returns(run_dir: Path, seed: int) -> dict[str, float]:
    """A Reacher-v5 run's latest actor on REACHER_EVAL_EPISODES deterministic episodes: the mean
    env return and the mean return of each of the task's heads (distance, effort)."""
    from wheeler2.tasks.reacher import Reacher

    from wheeler2 import checkpoint as ckpt
    from wheeler2.config import load
    from wheeler2.env import policy_obs
    from wheeler2.runtime.heads import make_heads, make_task
    from wheeler2.runtime.parts import make_agent, make_env, space_info
    from wheeler2.runtime.plan import learner_plan, plan_team

    n = REACHER_EVAL_EPISODES
    config = load(run_dir / "config.toml")
    lead = learner_plan(plan_team(config))
    env = make_env(config, n, 7_777 + seed)
    heads = make_heads(config, env, make_task(config))
    agent = make_agent(config, lead, space_info(env.info, heads), 0)
    payload = ckpt.load(run_dir / "checkpoints" / "latest.pt")
    agent.load_state_dict(payload["members"][lead.name])
    task = Reacher()
    totals = {"env": 0.0, "distance": 0.0, "effort": 0.0}
    obs = env.reset(seed=7_777 + seed).obs
    done = np.zeros(n, bool)
    while not done.all():
        action = agent.act(policy_obs(obs, None), explore=False).action
        st = env.step(action)
        live = ~done
        args = (obs, action, st.final_obs, None, None, None)
        totals["env"] += float(st.reward[live].sum())
        totals["distance"] += float(task.distance(*args)[live].sum())
        totals["effort"] += float(task.effort(*args)[live].sum())
        done |= st.terminated | st.truncated
        obs = st.obs
    env.close()
    return {k: v / n for k, v in totals.items()}
