"""wheeler2's recurrent PPO update against sb3-contrib RecurrentPPO's ``train()``, on the same data.

    python -m experiments.rppo_update_vs_sb3            # seed 0
    python -m experiments.rppo_update_vs_sb3 --seed 3

Both sides are built from rl-zoo's CartPoleNoVel-v1 values: sb3-contrib's
``RecurrentPPO("MlpLstmPolicy", VecNormalize(norm_obs=True, norm_reward=False))`` with the
policy_kwargs of ``experiments.lib.setups`` (recurrent_ppo_vs_sb3's), and wheeler2's PPO agent
built by the
engine's own ``make_agent`` from ``cfg/cartpole_novel_rppo.toml`` (``core = "lstm"``,
``trunk_reads = "core"``). sb3's initial weights are copied into ours. The two layouts map one to
one (same tensor shapes, PyTorch's LSTM gate order i, f, g, o on both sides):

    lstm_actor.{weight,bias}_{ih,hh}_l0       -> policy.core.rnn.*   (LSTM 2 -> 64)
    mlp_extractor.policy_net.0.{weight,bias}  -> policy.trunk.0.*    (Linear 64 -> 64, ReLU)
    action_net.{weight,bias}                  -> policy.head.*       (Linear 64 -> 2, logits)
    lstm_critic.*                             -> critic.core.rnn.*
    mlp_extractor.value_net.0.*               -> critic.trunk.0.*
    value_net.*                               -> critic.head.*       (Linear 64 -> 1)

and the policy state rows of wheeler2 are ``[actor h | actor c | critic h | critic c]`` where
sb3 keeps ``RNNStates(pi=(h, c), vf=(h, c))``, each ``[1, n_envs, 64]``.

sb3 runs one rollout and one ``train()`` first (so the weights, Adam's moments and the LSTM
states carried into the compared rollout are not the initial ones), then collects the compared
rollout: 8 envs x 32 steps with the time limit cut to 16 steps, so the rollout holds episode
starts, terminations and truncations. wheeler2's agent, given sb3's weights and Adam state,
acts on the very observations sb3 stored (already normalized by sb3's VecNormalize: ours' own
normalizer is swapped for the identity here and compared on its own in item d), in the state
sb3 carried, and is handed sb3's actions, rewards and episode ends through ``observe``, as the
engine's member loop does; its update runs at the 32nd step as in a run.

Items (max |ours - sb3| unless said otherwise):
  a. the forward pass while acting (values, log-probs of sb3's actions, LSTM states after every
     step, the episode starts) and the first epoch's replay through the cores (each side's
     replayed log-probs and values against its own behaviour ones);
  b. GAE advantages and returns;
  c. ``train()``: losses, clip fraction and parameters after the update, for one epoch with
     sb3's random rotation landing on an env boundary, one epoch with the rotation cutting one
     env's sequence, the zoo's 20 epochs on boundaries, and 20 epochs with sb3's own draws;
  d. schedules over a 100k-step run, optimizer and loss settings, advantage normalization and
     the observation normalizer (same raw observation stream through both).

Nothing learns for long here: a handful of updates from one shared rollout (~25 s on one core).
Needs the ``bench`` extra. It prints its figures; results/notes/rppo_update_vs_sb3.md reads them.

Watching the two updates from the inside takes replacements: sb3-contrib's rollout buffer module
sees, for the rest of the process, a numpy whose ``random.randint`` is queued (its module
attribute ``np``, not numpy itself); its ``_get_samples`` and the policy's ``evaluate_actions``
are wrapped on the instances. On wheeler2's side the agent is a :class:`RecordingPPO`, a PPO
subclass that keeps what the on-policy base's ``log_probs`` and ``values`` return to the update,
and ``agents.ppo.gae`` is patched (``unittest.mock``, undone after each rollout) to keep the
advantages: no hook on either side offers these values.
"""

from __future__ import annotations

import argparse
import copy
import sys
from typing import Any
from unittest import mock

import numpy as np
import torch
from wheeler2.agents import ppo as ppo_module
from wheeler2.agents.onpolicy import Minibatch

from experiments.lib import CFG as CFG_DIR
from experiments.lib.setups import recurrent_ppo_zoo_kwargs

ENV_ID = "CartPoleNoVel-v1"
CFG = CFG_DIR / "cartpole_novel_rppo.toml"
N_ENVS, T = 8, 32
TIME_LIMIT = 16  # shorter than CartPole's 500, so the 32-step rollout holds truncations
TOTAL = 100_000  # the run length of recurrent_ppo_vs_sb3, over which both schedules decay
HID = 64

# (wheeler2 name, sb3 name) for every parameter; the suffixes are nn.LSTM's / nn.Linear's.
LSTM = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")
LIN = ("weight", "bias")
PARAM_MAP = (
    [(f"policy.core.rnn.{s}", f"lstm_actor.{s}") for s in LSTM]
    + [(f"policy.trunk.0.{s}", f"mlp_extractor.policy_net.0.{s}") for s in LIN]
    + [(f"policy.head.{s}", f"action_net.{s}") for s in LIN]
    + [(f"critic.core.rnn.{s}", f"lstm_critic.{s}") for s in LSTM]
    + [(f"critic.trunk.0.{s}", f"mlp_extractor.value_net.0.{s}") for s in LIN]
    + [(f"critic.head.{s}", f"value_net.{s}") for s in LIN]
)


def maxdiff(a: Any, b: Any) -> float:
    a = torch.as_tensor(np.asarray(a, np.float64))
    b = torch.as_tensor(np.asarray(b, np.float64))
    assert a.shape == b.shape, (a.shape, b.shape)
    return float((a - b).abs().max()) if a.numel() else 0.0


# -- sb3-contrib side ----------------------------------------------------------------------------


class Splits:
    """sb3-contrib's ``RecurrentRolloutBuffer.get`` rotates the flat (env-major) indices by
    ``np.random.randint(n_envs * n_steps)``; queued values replace those draws (the rest fall
    through to numpy), and every value used is kept in ``drawn``."""

    def __init__(self) -> None:
        self.queue: list[int] = []
        self.drawn: list[int] = []

    def randint(self, *args: Any, **kwargs: Any) -> int:
        v = self.queue.pop(0) if self.queue else int(np.random.randint(*args, **kwargs))
        self.drawn.append(v)
        return v


class _RandomProxy:
    def __init__(self, splits: Splits) -> None:
        self.randint = splits.randint

    def __getattr__(self, name: str) -> Any:
        return getattr(np.random, name)


class _NumpyProxy:
    """numpy for sb3_contrib.common.recurrent.buffers, but with its own ``random.randint``: the
    global numpy stays untouched."""

    def __init__(self, splits: Splits) -> None:
        self.random = _RandomProxy(splits)

    def __getattr__(self, name: str) -> Any:
        return getattr(np, name)


def build_sb3(seed: int) -> tuple[Any, Any, Splits]:
    import wheeler2.envs.novel  # noqa: F401 - registers CartPoleNoVel-v1
    from sb3_contrib import RecurrentPPO
    from sb3_contrib.common.recurrent import buffers as rbuf
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import configure
    from stable_baselines3.common.vec_env import VecEnvWrapper, VecNormalize

    class Recorder(VecEnvWrapper):
        """Keeps what each vector step returned before collect_rollouts touches it (it adds
        gamma V(terminal) to the rewards of truncated steps in place)."""

        def __init__(self, venv: Any) -> None:
            super().__init__(venv)
            self.steps: list[dict[str, Any]] = []

        def reset(self) -> Any:
            return self.venv.reset()

        def step_wait(self) -> Any:
            obs, rewards, dones, infos = self.venv.step_wait()
            self.steps.append(
                {
                    "obs": obs.copy(),
                    "reward": rewards.copy(),
                    "done": dones.copy(),
                    "truncated": np.array([bool(i.get("TimeLimit.truncated")) for i in infos]),
                    "final": [copy.deepcopy(i.get("terminal_observation")) for i in infos],
                }
            )
            return obs, rewards, dones, infos

    venv = make_vec_env(
        ENV_ID, n_envs=N_ENVS, seed=seed, env_kwargs={"max_episode_steps": TIME_LIMIT}
    )
    env = Recorder(VecNormalize(venv, norm_obs=True, norm_reward=False))

    kwargs = recurrent_ppo_zoo_kwargs()  # the values the learning comparison runs
    assert kwargs["n_steps"] == T and kwargs["policy_kwargs"]["lstm_hidden_size"] == HID
    model = RecurrentPPO("MlpLstmPolicy", env, **kwargs, seed=seed, device="cpu")
    model.set_logger(configure(None, []))
    splits = Splits()
    rbuf.np = _NumpyProxy(splits)
    return model, env, splits


def sb3_rollout(model: Any, env: Any) -> None:
    """One collect_rollouts as learn() runs it (progress updated after it, before train)."""
    from stable_baselines3.common.callbacks import BaseCallback

    class Nothing(BaseCallback):
        def _on_step(self) -> bool:
            return True

    cb = Nothing()
    cb.init_callback(model)
    model.collect_rollouts(env, cb, model.rollout_buffer, n_rollout_steps=model.n_steps)
    model._update_current_progress_remaining(model.num_timesteps, TOTAL)


# -- wheeler2 side -------------------------------------------------------------------------------


class RecordingPPO(ppo_module.PPO):
    """PPO keeping, per minibatch of its update, ``[copies, log-probs, entropy, V]`` as the
    on-policy base's :meth:`log_probs` and :meth:`values` return them (the update calls them
    in that order), in ``replays``."""

    replays: list[list[Any]]

    def log_probs(self, mb: Minibatch | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        logp, entropy = super().log_probs(mb)
        copies = None if mb is None or mb.copies is None else mb.copies.clone()
        self.replays.append([copies, logp.detach().clone(), entropy.detach().clone()])
        return logp, entropy

    def values(self, mb: Minibatch | None = None) -> torch.Tensor:
        v = super().values(mb)
        self.replays[-1].append(v.detach().clone())
        return v


def build_ours(seed: int, n_epochs: int) -> Any:
    """The agent as the engine builds it (config -> plan -> space -> make_agent)."""
    from wheeler2.agents.normalize import IdentityNorm

    from wheeler2.config import load
    from wheeler2.runtime.heads import make_heads, make_task
    from wheeler2.runtime.parts import make_agent, make_env, space_info
    from wheeler2.runtime.plan import learner_plan, plan_team
    from wheeler2.runtime.seeds import member_seed

    config = load(CFG, overrides=[f"team.0.params.n_epochs={n_epochs}"], seed=seed)
    plan = learner_plan(plan_team(config))
    mseed = member_seed(config, plan)
    env = make_env(config, N_ENVS, mseed, plan)
    try:
        heads = make_heads(config, env, make_task(config))
        space = space_info(env.info, heads)
    finally:
        env.close()
    agent = make_agent(config, plan, space, mseed)
    # The engine's agent, recording what its update reads (RecordingPPO only adds `replays`).
    assert type(agent) is ppo_module.PPO, type(agent)
    agent.__class__ = RecordingPPO
    agent.replays = []
    # The inputs below are sb3's already-normalized observations; item d compares normalizers.
    agent.obs_norm = IdentityNorm()
    return agent


def ours_params(agent: Any) -> dict[str, torch.nn.Parameter]:
    named = {f"policy.{k}": v for k, v in agent.policy.named_parameters()}
    named |= {f"critic.{k}": v for k, v in agent.critic.named_parameters()}
    return named


def load_sb3_into_ours(agent: Any, model: Any) -> None:
    """Weights and Adam's per-parameter state (step, moments) from sb3 into ours."""
    mine, theirs = ours_params(agent), dict(model.policy.named_parameters())
    assert sorted(mine) == sorted(o for o, _ in PARAM_MAP), sorted(mine)
    assert sorted(theirs) == sorted(s for _, s in PARAM_MAP), sorted(theirs)
    opt_state = model.policy.optimizer.state
    with torch.no_grad():
        for o, s in PARAM_MAP:
            assert mine[o].shape == theirs[s].shape, (o, s)
            mine[o].copy_(theirs[s])
            if theirs[s] in opt_state:
                agent.opt.state[mine[o]] = {k: v.clone() for k, v in opt_state[theirs[s]].items()}


def param_diff(agent: Any, model: Any) -> tuple[float, float]:
    mine, theirs = ours_params(agent), dict(model.policy.named_parameters())
    d = torch.cat([(mine[o] - theirs[s]).detach().abs().flatten() for o, s in PARAM_MAP])
    return float(d.max()), float(d.quantile(0.99))


def flat_params(model: Any) -> torch.Tensor:
    return torch.cat([p.detach().flatten().clone() for _, p in model.policy.named_parameters()])


def sb3_state(states: Any, t: int | None = None) -> np.ndarray:
    """sb3's (pi, vf) LSTM states as wheeler2's flat rows [n, 4 * 64]; ``states`` is either
    RNNStates (t None) or the rollout buffer (the state stored at step t)."""
    if t is None:
        parts = [states.pi[0], states.pi[1], states.vf[0], states.vf[1]]
        parts = [p[0].detach().numpy() for p in parts]
    else:
        b = states
        parts = [b.hidden_states_pi[t, 0], b.cell_states_pi[t, 0]]
        parts += [b.hidden_states_vf[t, 0], b.cell_states_vf[t, 0]]
    return np.concatenate(parts, axis=1).astype(np.float32)


def ours_rollout(agent: Any, data: dict[str, Any]) -> dict[str, Any]:
    """Drive ``agent`` through the recorded rollout as the member loop does: act in the carried
    state, observe the step (with sb3's action), reset the state rows where an episode ended.
    Returns what it saw; the update runs inside the last observe."""
    from wheeler2.agent import ActOut, Transitions

    buf, steps = data["buffer"], data["steps"]
    seen: dict[str, Any] = {"values": [], "states": [], "gae": None}
    real_gae = ppo_module.gae

    def gae_spy(*args: Any, **kwargs: Any) -> torch.Tensor:
        out = real_gae(*args, **kwargs)
        seen["gae"] = out.clone()
        return out

    agent.replays.clear()
    with mock.patch.object(ppo_module, "gae", side_effect=gae_spy):
        state = data["state0"].copy()
        state[data["start0"]] = 0.0  # the member puts initial_state rows where an episode ended
        metrics = None
        for t in range(T):
            obs = buf.observations[t].astype(np.float32)
            st = steps[t]
            out = agent.act(obs, explore=True, state=state)
            action = buf.actions[t, :, 0].astype(np.int64)
            next_obs = st["obs"].copy()
            for i, final in enumerate(st["final"]):
                if st["done"][i] and final is not None:
                    next_obs[i] = final
            truncated = st["truncated"] & st["done"]
            metrics = agent.observe(
                Transitions(
                    obs=obs,
                    action=action,
                    reward=st["reward"].astype(np.float32)[:, None],
                    next_obs=next_obs.astype(np.float32),
                    terminated=st["done"] & ~truncated,
                    truncated=truncated,
                    reset_obs=st["obs"].astype(np.float32),
                    # logp None: the agent scores sb3's action in the state it was taken in.
                    act_out=ActOut(action=action, logp=None, extras=out.extras, state=out.state),
                    state=state,
                )
            )
            seen["values"].append(out.extras["value"].copy())
            seen["states"].append(out.state.copy())
            state = out.state.copy()
            state[st["done"]] = 0.0
    seen["replay"] = agent.replays
    seen["metrics"] = metrics
    return seen


# -- the comparison ------------------------------------------------------------------------------


def restore_sb3(model: Any, data: dict[str, Any], n_epochs: int) -> None:
    model.policy.load_state_dict(data["policy"])
    model.policy.optimizer.load_state_dict(data["opt"])
    model.rollout_buffer = copy.deepcopy(data["buffer"])
    model.n_epochs = n_epochs


def sb3_train(model: Any, splits: Splits, queue: list[int], seed: int) -> dict[str, Any]:
    """train() with the given rotations (empty: sb3's own draws, numpy seeded), capturing the
    first epoch's samples and replay outputs."""
    captured: dict[str, Any] = {}
    rb = model.rollout_buffer
    real_get, real_eval = rb._get_samples, model.policy.evaluate_actions

    def get_spy(*args: Any, **kwargs: Any) -> Any:
        out = real_get(*args, **kwargs)
        captured.setdefault("sample", out)
        return out

    def eval_spy(*args: Any, **kwargs: Any) -> Any:
        out = real_eval(*args, **kwargs)
        captured.setdefault("eval", tuple(x.detach().clone() for x in out))
        return out

    rb._get_samples, model.policy.evaluate_actions = get_spy, eval_spy
    splits.queue[:] = list(queue)
    splits.drawn.clear()
    np.random.seed(seed)
    before = flat_params(model)
    try:
        model.train()
    finally:
        del model.policy.evaluate_actions
    captured["step"] = float((flat_params(model) - before).abs().max())
    captured["splits"] = list(splits.drawn)
    captured["logs"] = dict(model.logger.name_to_value)
    captured["lr"] = model.policy.optimizer.param_groups[0]["lr"]
    return captured


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    seed = args.seed

    model, env, splits = build_sb3(seed)
    model._setup_learn(TOTAL, None, True, "run", False)
    sb3_rollout(model, env)  # warm-up: one rollout and one train() on sb3's side alone
    model.train()
    state0 = sb3_state(model._last_lstm_states)
    start0 = np.asarray(model._last_episode_starts, bool).copy()
    policy0 = copy.deepcopy(model.policy.state_dict())
    opt0 = copy.deepcopy(model.policy.optimizer.state_dict())
    env.steps.clear()
    sb3_rollout(model, env)
    data = {
        "buffer": copy.deepcopy(model.rollout_buffer),
        "steps": list(env.steps),
        "state0": state0,
        "start0": start0,
        "final_state": sb3_state(model._last_lstm_states),
        "policy": policy0,
        "opt": opt0,
        "num_timesteps": model.num_timesteps,
    }
    buf = data["buffer"]
    dones = np.stack([s["done"] for s in data["steps"]])
    truncs = np.stack([s["truncated"] for s in data["steps"]]) & dones
    starts = buf.episode_starts.astype(bool)
    print(
        f"rollout: {N_ENVS} envs x {T} steps, time limit {TIME_LIMIT}; "
        f"{int(dones.sum())} episode ends ({int(truncs.sum())} truncated), "
        f"{int(starts[1:].sum())} episode starts inside, carried state |h,c| max "
        f"{np.abs(state0).max():.3f}, {data['num_timesteps']} env steps at the update"
    )

    def ours_like_sb3(n_epochs: int) -> Any:
        """A fresh agent holding sb3's current weights and Adam state."""
        agent = build_ours(seed, n_epochs)
        load_sb3_into_ours(agent, model)
        agent.env_steps = data["num_timesteps"] - N_ENVS * T  # the first rollout's steps
        return agent

    # ---- a, b: forward pass and GAE (the update has not touched these) ----
    restore_sb3(model, data, 1)
    agent = ours_like_sb3(1)
    seen = ours_rollout(agent, data)
    roll = agent.rollout
    after = [sb3_state(buf, t + 1) for t in range(T - 1)] + [data["final_state"]]
    print("\na. forward pass while acting (ours on sb3's inputs, in sb3's carried states)")
    print(
        f"   values V(s_t)                    max |diff| {maxdiff(seen['values'], buf.values):.1e}"
    )
    print(
        f"   log pi(a_t) of sb3's actions     max |diff| "
        f"{maxdiff(roll.logp.numpy(), buf.log_probs):.1e}"
    )
    actor_s = [s[:, : 2 * HID] for s in seen["states"]]
    critic_s = [s[:, 2 * HID :] for s in seen["states"]]
    print(
        f"   LSTM (h, c) after each step      max |diff| actor "
        f"{maxdiff(actor_s, [a[:, : 2 * HID] for a in after]):.1e}  critic "
        f"{maxdiff(critic_s, [a[:, 2 * HID :] for a in after]):.1e}"
    )
    ours_starts = roll.starts.numpy()
    print(
        f"   episode starts t >= 1            {int(ours_starts[1:].sum())} ours, "
        f"{int(starts[1:].sum())} sb3, rows differing {int((ours_starts[1:] != starts[1:]).sum())}"
        f"; t = 0: sb3 flags {int(starts[0].sum())}, ours gets those rows' state zeroed "
        f"(state0 |max| there {np.abs(roll.state0.numpy()[starts[0]]).max(initial=0):.1e})"
    )
    copies, r_logp, _, r_v = seen["replay"][0]
    b_logp = roll.logp[:, copies].flatten()
    b_v = roll.value[:, copies].flatten()
    print(
        f"   first-epoch replay vs behaviour  ours: log pi {maxdiff(r_logp, b_logp):.1e}, "
        f"V {maxdiff(r_v, b_v):.1e}"
    )
    # sb3's first epoch, split on a boundary and cut, against its own behaviour numbers.
    for label, queue in (("boundary", [3 * T]), ("cut", [3 * T + 13])):
        restore_sb3(model, data, 1)
        cap = sb3_train(model, splits, queue, seed)
        smp, (v, lp, _) = cap["sample"], cap["eval"]
        m = smp.mask > 1e-8
        print(
            f"   first-epoch replay vs behaviour  sb3 ({label}, split {cap['splits'][0]}, "
            f"{len(m)} padded rows): log pi "
            f"{maxdiff(lp[m], smp.old_log_prob[m]):.1e}, V "
            f"{maxdiff(v.flatten()[m], smp.old_values[m]):.1e}"
        )

    print("\nb. GAE(0.98, 0.8) on the same rewards, dones, truncations and last values")
    adv = seen["gae"].numpy()
    ret = adv + roll.value.numpy()
    print(
        f"   advantages max |diff| {maxdiff(adv, buf.advantages):.1e} "
        f"(|A| max {np.abs(buf.advantages).max():.2f}); returns max |diff| "
        f"{maxdiff(ret, buf.returns):.1e} (|R| max {np.abs(buf.returns).max():.2f})"
    )
    trunc_rows = truncs
    if trunc_rows.any():
        print(
            f"   at the {int(trunc_rows.sum())} truncated steps: advantages max |diff| "
            f"{maxdiff(adv[trunc_rows], buf.advantages[trunc_rows]):.1e}"
        )

    # ---- c: the update ----
    print("\nc. train(): losses and parameters after the update (sb3 vs ours)")
    cut_start = bool(starts[13, 3])  # a cut at an episode start would cut nothing
    print(f"   (env 3 starts an episode at t=13: {cut_start})")
    cases = (
        ("1 epoch, split on an env boundary", 1, [3 * T]),
        ("1 epoch, split cutting env 3 at t=13", 1, [3 * T + 13]),
        ("20 epochs, every split on a boundary", 20, [k * T for k in (3, 0, 5, 1, 7) * 4]),
        ("20 epochs, sb3's own random splits", 20, []),
    )
    for label, n_epochs, queue in cases:
        restore_sb3(model, data, n_epochs)
        agent = ours_like_sb3(n_epochs)
        cap = sb3_train(model, splits, queue, seed)
        seen = ours_rollout(agent, data)
        m, logs = seen["metrics"], cap["logs"]
        pmax, p99 = param_diff(agent, model)
        cut = sum(s % T != 0 for s in cap["splits"])
        print(f"   {label} (splits off a boundary: {cut}/{len(cap['splits'])})")
        print(
            f"     policy loss ours {m['policy_loss']:+.7f} sb3 "
            f"{logs['train/policy_gradient_loss']:+.7f} | value loss ours "
            f"{m['value_loss']:.7f} sb3 {logs['train/value_loss']:.7f} | clip fraction ours "
            f"{m['clip_fraction']:.5f} sb3 {logs['train/clip_fraction']:.5f}"
        )
        print(
            f"     entropy ours {m['entropy']:.7f} sb3 {-logs['train/entropy_loss']:.7f} | "
            f"approx KL ours {m['approx_kl']:.2e} sb3 {logs['train/approx_kl']:.2e} | "
            f"lr ours {m['lr']:.8f} sb3 {cap['lr']:.8f}"
        )
        print(
            f"     parameters after: max |diff| {pmax:.1e}, p99 {p99:.1e} "
            f"(largest single-parameter change on sb3's side {cap['step']:.1e})"
        )

    # ---- d: schedules, settings, normalizers ----
    print("\nd. settings")
    p = agent.params
    updates = np.arange(1, TOTAL // (N_ENVS * T) + 2)  # learn() runs while num_timesteps < 100k
    lr_ours, clip_ours, lr_sb3, clip_sb3 = [], [], [], []
    for k in updates:
        agent.env_steps = int(k * N_ENVS * T)
        lr_ours.append(agent.schedule(p.lr, p.lr_schedule))
        clip_ours.append(agent.schedule(p.clip_range, p.clip_schedule))
        progress = 1.0 - float(k * N_ENVS * T) / TOTAL
        lr_sb3.append(model.lr_schedule(progress))
        clip_sb3.append(model.clip_range(progress))
    inside = updates * N_ENVS * T <= TOTAL
    print(
        f"   schedules over {int(inside.sum())} updates (at env steps 256, 512, ..., "
        f"{int(updates[inside][-1] * N_ENVS * T)}); ours total_steps = {p.total_steps}: lr max "
        f"|diff| {maxdiff(np.array(lr_ours)[inside], np.array(lr_sb3)[inside]):.1e}, clip max "
        f"|diff| {maxdiff(np.array(clip_ours)[inside], np.array(clip_sb3)[inside]):.1e}"
    )
    print(
        f"   update {int(updates[-1])} (at {int(updates[-1] * N_ENVS * T)} env steps, only if a "
        f"run goes past 100k): lr ours {lr_ours[-1]:.2e} sb3 {lr_sb3[-1]:.2e}, clip ours "
        f"{clip_ours[-1]:.2e} sb3 {clip_sb3[-1]:.2e}"
    )
    od, sd = agent.opt.defaults, model.policy.optimizer.defaults
    keys = ("eps", "betas", "weight_decay", "amsgrad")
    print("   Adam " + ", ".join(f"{k} ours {od[k]} sb3 {sd[k]}" for k in keys))
    pairs = (
        ("max_grad_norm", p.max_grad_norm, model.max_grad_norm),
        ("vf_coef", p.vf_coef, model.vf_coef),
        ("ent_coef", p.ent_coef, model.ent_coef),
        ("gamma", p.gamma, model.gamma),
        ("gae_lambda", p.gae_lambda, model.gae_lambda),
        ("normalize_advantage", p.normalize_advantage, model.normalize_advantage),
        ("clip_range_vf", p.clip_range_vf or None, model.clip_range_vf),
        ("target_kl", None, model.target_kl),
    )
    print("   " + ", ".join(f"{k} ours {a} sb3 {b}" for k, a, b in pairs))
    a = torch.as_tensor(buf.advantages.flatten())
    centred = a - a.mean()
    bessel = float((centred / a.std(unbiased=False) - centred / a.std()).abs().max())
    print(
        "   advantage normalization: both (a - mean) / (std + 1e-8) over the 256 rows of the "
        "minibatch (sb3: its mask drops the padding), torch's std with Bessel's correction; "
        f"without it the normalized advantages here would change by up to "
        f"{bessel:.1e}"
    )
    compare_normalizers(seed)
    return 0


def compare_normalizers(seed: int, steps: int = 4000) -> None:
    """The same raw CartPoleNoVel-v1 stream (8 copies, random actions, autoreset) through sb3's
    VecNormalize (update with the step's observations, then normalize them) and through a
    wheeler2 PPO agent with ``normalize_obs`` acting on it (``act`` and ``observe`` as a member
    calls them; the input its policy sees is read by a forward hook)."""
    import wheeler2.envs.novel  # noqa: F401
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize
    from wheeler2.agents.ppo import PPO
    from wheeler2.agents.ppo import Params as PPOParams

    from wheeler2.agent import SpaceInfo, Transitions

    venv = VecNormalize(make_vec_env(ENV_ID, n_envs=N_ENVS, seed=seed), norm_obs=True,
                        norm_reward=False)  # fmt: skip
    # Feedforward: the normalizer's calls are the recurrent agent's; no update within the stream.
    agent = PPO(SpaceInfo(2, 2, True), PPOParams(hidden=[8], n_steps=steps + 1,
                                                 normalize_obs=True), seed=seed)  # fmt: skip
    seen: list[np.ndarray] = []
    agent.policy.register_forward_pre_hook(lambda _m, args: seen.append(args[0].numpy().copy()))
    rng = np.random.default_rng(seed)
    theirs_t = venv.reset()
    diffs = []
    no = np.zeros(N_ENVS, bool)
    for _ in range(steps):
        raw = venv.get_original_obs()
        out = agent.act(raw, explore=True)
        diffs.append(np.abs(seen.pop() - theirs_t).max())
        theirs_t, _, done, _ = venv.step(rng.integers(0, 2, N_ENVS))
        nxt = venv.get_original_obs()  # where a copy ended: its next episode's first
        reward = np.zeros((N_ENVS, 1), np.float32)
        agent.observe(Transitions(raw, out.action, reward, nxt, done, no, nxt, out))
    d = np.array(diffs)
    spans = ((0, 1), (1, T), (T, 4 * T), (4 * T, 40 * T), (40 * T, steps))
    cells = ", ".join(
        f"{a * N_ENVS}-{b * N_ENVS - 1}: {d[a:b].max():.1e} / {np.median(d[a:b]):.1e}"
        for a, b in spans
    )
    print(
        f"   observation normalizer: one raw stream of {steps * N_ENVS} env steps (8 copies, "
        "random actions) through both; per vector step the max |diff| of the normalized inputs "
        f"the policy sees, its max / median over each span of env steps:\n     {cells}"
    )
    norm = agent.obs_norm
    print(
        f"     sb3: clip {venv.clip_obs}, epsilon {venv.epsilon} inside the sqrt, running "
        f"statistics from mean 0, var 1, count 1e-4; ours: clip {norm.clip}, std floored at "
        f"{norm.eps}, statistics from the samples alone"
    )


if __name__ == "__main__":
    sys.exit(main())
