"""Every algorithm learns on a GPU with ``device = "cuda"``, and what a DDPG step costs there.

For each algorithm, feedforward and with a GRU core where it has one: build it on the device,
take learning steps (off-policy: ``learn`` on a random replay-shaped batch, sequences for a
core; on-policy: rollouts through ``act`` and ``observe``), and check that every parameter is
still on the device and finite and that acting returns actions of the right shape. Then DDPG's
gradient steps per second at HalfCheetah shapes (obs 17, act 6, hidden [256, 256], batch 256)
on the device and on the CPU, in the same process. Prints a table; needs a CUDA device.

    python -m experiments.cuda_check [--steps 200]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import torch

from wheeler2.agent import ActOut, Agent, Batch, SpaceInfo, Transitions
from wheeler2.registry import resolve_algo

OFF_POLICY = ("ddpg", "td3", "sac", "dqn", "crossq")
ON_POLICY = ("ppo", "a2c", "pg")
RECURRENT = ("ddpg", "td3", "sac", "dqn", "ppo", "a2c")  # the algorithms with a core option
OBS, ACT, SEQ_T, BURN = 8, 2, 8, 4


def build(algo: str, core: str, device: str) -> Agent:
    cls = resolve_algo(algo)
    discrete = algo in ("dqn",)
    space = SpaceInfo(OBS, 3 if discrete else ACT, discrete)
    values: dict[str, Any] = {"hidden": [64, 64], "device": device}
    if algo in OFF_POLICY:
        values["learning_starts"] = 0
    else:
        values.update(n_steps=16)
    if core != "none":
        values.update(core=core, core_size=32)
        if algo in OFF_POLICY:
            values.update(seq_length=SEQ_T - BURN, seq_burn_in=BURN)
    return cls(space, cls.Params(**values), device=device, seed=0)


def replay_batch(agent: Agent, rng: np.random.Generator, device: str, b: int = 64) -> Batch:
    """A random batch shaped as the replay hands it: transitions, or sequences for a core."""
    space = agent.space
    lead = (b,) if not agent.state_dim else (b, SEQ_T)
    action = (
        rng.integers(0, space.act_dim, lead)
        if space.discrete
        else rng.uniform(-1, 1, (*lead, space.act_dim)).astype(np.float32)
    )
    arrays: dict[str, np.ndarray] = {
        "obs": rng.standard_normal((*lead, OBS)).astype(np.float32),
        "action": action,
        "reward": rng.standard_normal((*lead, 1)).astype(np.float32),
        "next_obs": rng.standard_normal((*lead, OBS)).astype(np.float32),
        "discount": np.full(lead, 0.99, np.float32),
        "weight": np.ones(b, np.float32),
        "index": np.arange(b),
    }
    if agent.state_dim:
        arrays.update(
            boot=np.tile(np.arange(SEQ_T), (b, 1)),
            alive=np.ones((b, SEQ_T), bool),
            mask=np.tile(np.arange(SEQ_T) >= BURN, (b, 1)),
            burn=np.full(b, BURN),
            state=np.zeros((b, agent.state_dim), np.float32),
        )
    return Batch.from_numpy(arrays, device)


def rollout_steps(agent: Agent, rng: np.random.Generator, steps: int, n: int = 4) -> None:
    """``steps`` vector steps of ``n`` copies through act and observe (on-policy learning)."""
    obs = rng.standard_normal((n, OBS)).astype(np.float32)
    state = agent.initial_state(n) if agent.state_dim else None
    for t in range(steps):
        out: ActOut = agent.act(obs, True, state) if state is not None else agent.act(obs, True)
        nxt = rng.standard_normal((n, OBS)).astype(np.float32)
        done = np.full(n, t % 10 == 9)
        agent.observe(
            Transitions(
                obs=obs,
                action=out.action,
                reward=rng.standard_normal((n, 1)).astype(np.float32),
                next_obs=nxt,
                terminated=done,
                truncated=np.zeros(n, bool),
                reset_obs=nxt,
                act_out=out,
                state=state,
            )
        )
        obs, state = nxt, out.state


def check(algo: str, core: str, device: str, steps: int) -> str:
    rng = np.random.default_rng(0)
    agent = build(algo, core, device)
    start = time.perf_counter()
    if agent.uses_replay:
        for _ in range(steps):
            agent.learn(replay_batch(agent, rng, device))
    else:
        rollout_steps(agent, rng, steps)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    params = [
        p
        for module in vars(agent).values()
        if isinstance(module, torch.nn.Module)
        for p in module.parameters()
    ]
    assert params and all(p.device.type == device for p in params), "a parameter left the device"
    assert all(bool(torch.isfinite(p).all()) for p in params), "a parameter is not finite"
    obs = rng.standard_normal((3, OBS)).astype(np.float32)
    act = (
        agent.act(obs, False, agent.initial_state(3)) if agent.state_dim else agent.act(obs, False)
    )
    assert len(act.action) == 3
    return f"| {algo} | {core} | {steps} | {seconds:.2f} | ok |"


def ddpg_steps_per_s(device: str, seconds: float = 5.0) -> float:
    cls = resolve_algo("ddpg")
    params = cls.Params(hidden=[256, 256], learning_starts=0, device=device)
    agent = cls(SpaceInfo(17, 6, False), params, device=device, seed=0)
    rng = np.random.default_rng(0)
    arrays = {
        "obs": rng.standard_normal((256, 17)).astype(np.float32),
        "action": rng.uniform(-1, 1, (256, 6)).astype(np.float32),
        "reward": rng.standard_normal((256, 1)).astype(np.float32),
        "next_obs": rng.standard_normal((256, 17)).astype(np.float32),
        "discount": np.full(256, 0.99, np.float32),
        "weight": np.ones(256, np.float32),
        "index": np.arange(256),
    }
    batch = Batch.from_numpy(arrays, device)
    for _ in range(20):  # warm-up: kernels, allocator
        agent.learn(batch)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        agent.learn(batch)
        count += 1
    return count / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=200, help="learn calls or vector steps")
    ap.add_argument("--device", default="cuda", help="cpu: the same checks, as a dry run")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: no CUDA device")
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"device: {name}, torch {torch.__version__}")
    print("| algo | core | steps | seconds | result |\n| --- | --- | --- | --- | --- |")
    for algo in (*OFF_POLICY, *ON_POLICY):
        for core in ("none", "gru") if algo in RECURRENT else ("none",):
            print(check(algo, core, args.device, args.steps), flush=True)
    if args.device != "cuda":
        return
    # learn() reports its metrics as Python floats, one device sync a step, as on the CPU.
    gpu, cpu = ddpg_steps_per_s("cuda"), ddpg_steps_per_s("cpu")
    print(
        f"DDPG gradient steps/s, HalfCheetah shapes, batch 256: cuda {gpu:.0f}, "
        f"cpu {cpu:.0f} ({torch.get_num_threads()} threads), cuda/cpu {gpu / cpu:.2f}x"
    )


if __name__ == "__main__":
    main()
