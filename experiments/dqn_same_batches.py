"""wheeler2's DQN and SB3's, fed the same replay batches from the same weights (issue 40).

    python -m experiments.dqn_same_batches [--game SpaceInvaders] [--updates 5000]
                                           [--transitions 20000] [--seed 0]

``experiments/minatar_vs_sb3.py`` found wheeler2's DQN level with SB3's on MinAtar Breakout and
behind on SpaceInvaders over 5 seeds, with the seed-to-seed spread as wide as the gap. This
script takes the learning out of the comparison's noise: it asks whether the two implementations
compute the same update.

Both sides are built as the comparison builds them (wheeler2's ``DQN`` with
``cfg/minatar_<game>.toml``'s parameters and ``double = false``; SB3's model from
:func:`experiments.minatar_vs_sb3.sb3_model`); SB3's online and target networks get wheeler2's
initial weights. ``--transitions`` transitions of ``MinAtar/<game>-v1`` are collected with
uniformly random actions, and every update draws one batch of 32 of them, the same rows for
both sides: wheeler2 through ``DQN.learn`` (its whole update: view, target, Huber loss, clip,
fused Adam, target copy every ``target_update`` updates), SB3 through ``DQN.train`` with its
replay's ``sample`` returning that batch, then ``DQN._on_step`` (its target copy every
``target_update_interval`` calls). The epsilon schedules of both over env steps are compared
too.

Written: ``experiments/results/dqn_same_batches_<game>.md`` and its plot (every twentieth of
the updates: both losses, the largest relative difference of the two so far, the relative
difference of the parameters (the norm of the difference over the norm of wheeler2's, in
both parameter columns), and how often the two networks pick the same greedy action on
1,000 held-out states). The yardstick beside them: wheeler2 against itself with every initial
weight moved by one float32 step, which shows how far float rounding alone carries two runs
apart.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from experiments.lib import RESULTS, ROOT, report, runs
from experiments.minatar_vs_sb3 import CONFIGS, sb3_model

BATCH = 32
GAMMA = 0.99


def collect(game: str, n: int, seed: int) -> dict[str, np.ndarray]:
    """``n`` transitions of uniformly random play, observations as the (C, 10, 10) uint8 frames
    of 0 / 255 both sides see, flattened as wheeler2's replay stores them."""
    _, make = sb3_model(game, seed, 500_000)
    env = make()
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    rows: dict[str, list[Any]] = {k: [] for k in ("obs", "action", "reward", "next", "done")}
    for _ in range(n):
        a = int(rng.integers(env.action_space.n))
        nxt, r, term, trunc, _ = env.step(a)
        for k, v in zip(rows, (obs, a, r, nxt, term)):
            rows[k].append(v)
        obs = env.reset()[0] if term or trunc else nxt
    env.close()
    return {
        "obs": np.stack(rows["obs"]).reshape(n, -1),
        "action": np.asarray(rows["action"], np.int64),
        "reward": np.asarray(rows["reward"], np.float32),
        "next": np.stack(rows["next"]).reshape(n, -1),
        "done": np.asarray(rows["done"], np.float32),
    }


def wheeler2_dqn(game: str, data: dict[str, np.ndarray], seed: int) -> Any:
    """wheeler2's DQN with the shipped file's parameters (vanilla targets, as compared)."""
    from wheeler2.agents.dqn import DQN, Params

    from wheeler2.agent import SpaceInfo
    from wheeler2.config import load

    cfg = load(ROOT / "cfg" / CONFIGS[game], overrides=["team.dqn.params.double=false"])
    params = cfg.team[0].params
    assert isinstance(params, Params) and not params.double
    c = data["obs"].shape[1] // 100
    space = SpaceInfo(
        obs_dim=data["obs"].shape[1],
        act_dim=int(data["action"].max()) + 1,
        discrete=True,
        obs_shape=(c, 10, 10),
    )
    return DQN(space, params, seed=seed)


def copy_weights(src: torch.nn.Module, *dst: torch.nn.Module) -> None:
    """``src``'s parameters into each of ``dst`` in order (the same layers, named differently)."""
    with torch.no_grad():
        for net in dst:
            for a, b in zip(src.parameters(), net.parameters(), strict=True):
                assert a.shape == b.shape, (a.shape, b.shape)
                b.copy_(a)


def flat(net: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def compare(game: str, updates: int, transitions: int, seed: int) -> dict[str, Any]:
    from stable_baselines3.common.logger import configure
    from stable_baselines3.common.type_aliases import ReplayBufferSamples

    from wheeler2.agent import Batch

    torch.manual_seed(seed)
    data = collect(game, transitions + 1_000, seed)
    held_out = torch.as_tensor(data["obs"][transitions:])  # states for the greedy-action check
    w2 = wheeler2_dqn(game, data, seed)
    sb3, _ = sb3_model(game, seed, 500_000)
    sb3.set_logger(configure(None, [""]))
    copy_weights(w2.q, sb3.q_net, sb3.q_net_target)
    assert w2.params.target_update == sb3.target_update_interval
    # The control: wheeler2 against itself, every initial weight moved by one float32 step
    # (one ulp). How far two runs of one implementation drift apart from a rounding difference
    # is the yardstick for how far the two implementations drift.
    ulp = wheeler2_dqn(game, data, seed)
    with torch.no_grad():
        for net in (ulp.q, ulp.q_target):
            for param in net.parameters():
                param.copy_(torch.nextafter(param, torch.full_like(param, torch.inf)))

    # SB3 reads the images as (C, H, W) uint8 and scales them itself, as in its runs.
    shape = (BATCH, *sb3.observation_space.shape)
    rng = np.random.default_rng(seed + 1)
    checkpoints = {max(1, updates * k // 20) for k in range(1, 21)}
    rows, worst_loss = [], 0.0
    start = time.perf_counter()
    for u in range(1, updates + 1):
        i = rng.integers(0, transitions, BATCH)
        obs, nxt = data["obs"][i], data["next"][i]
        act, rew, done = data["action"][i], data["reward"][i], data["done"][i]
        batch = Batch(
            obs=torch.as_tensor(obs),
            action=torch.as_tensor(act),
            reward=torch.as_tensor(rew)[:, None],
            next_obs=torch.as_tensor(nxt),
            discount=torch.as_tensor(GAMMA * (1.0 - done)),
            weight=torch.ones(BATCH),
            index=i,
        )
        w2_loss = w2.learn(batch).metrics["loss"]
        ulp.learn(batch)
        sample = ReplayBufferSamples(
            observations=torch.as_tensor(obs.reshape(shape)),
            actions=torch.as_tensor(act[:, None]),
            next_observations=torch.as_tensor(nxt.reshape(shape)),
            dones=torch.as_tensor(done[:, None]),
            rewards=torch.as_tensor(rew[:, None]),
        )
        sb3.replay_buffer.sample = lambda *_a, _s=sample, **_k: _s  # type: ignore[method-assign]
        sb3.train(gradient_steps=1, batch_size=BATCH)
        sb3._on_step()  # its target copy, counted per call as per env step in its runs
        sb3_loss = float(sb3.logger.name_to_value["train/loss"])
        worst_loss = max(worst_loss, abs(w2_loss - sb3_loss) / max(abs(sb3_loss), 1e-8))
        if u in checkpoints:
            a, b, c = flat(w2.q), flat(sb3.q_net), flat(ulp.q)
            with torch.no_grad():
                greedy = w2.q(held_out).argmax(-1)
                same = greedy == sb3.q_net(held_out.reshape(-1, *shape[1:])).argmax(-1)
                same_ulp = greedy == ulp.q(held_out).argmax(-1)
            rows.append(
                {
                    "updates": u,
                    "loss_rel": worst_loss,
                    "param_rel": ((a - b).norm() / a.norm()).item(),  # both against wheeler2's norm
                    "ulp_rel": ((a - c).norm() / a.norm()).item(),
                    "greedy_same": same.float().mean().item(),
                    "greedy_same_ulp": same_ulp.float().mean().item(),
                    "w2_loss": w2_loss,
                    "sb3_loss": sb3_loss,
                }
            )
    eps = []
    for step in (0, 2_500, 5_000, 50_000, 99_999, 100_000, 300_000):
        w2.env_steps = step
        sb3._current_progress_remaining = 1.0 - step / 500_000
        eps.append((step, w2.epsilon, sb3.exploration_schedule(sb3._current_progress_remaining)))
    return {"rows": rows, "eps": eps, "seconds": time.perf_counter() - start}


def plot(records: list[dict[str, Any]], path: Path, **settings: Any) -> None:
    """The relative parameter difference against updates: wheeler2 against SB3, and wheeler2
    against itself one ulp away."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = chosen(records, **settings)["rows"]
    xs = [r["updates"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.semilogy(xs, [r["param_rel"] for r in rows], "o-", label="wheeler2 vs SB3")
    ax.semilogy(xs, [r["ulp_rel"] for r in rows], "s--", label="wheeler2 vs itself, one ulp away")
    ax.set_xlabel("updates on the same batches")
    ax.set_ylabel("|theta_a - theta_b| / |theta_a|")
    ax.set_title(f"DQN on MinAtar/{settings['game']}-v1: same batches, same start")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def chosen(records: list[dict[str, Any]], **settings: Any) -> dict[str, Any]:
    """The last stored comparison at ``settings``."""
    mine = [r for r in records if all(r.get(k) == v for k, v in settings.items())]
    if not mine:
        raise ValueError(f"no stored comparison at {settings}")
    return mine[-1]


def render(records: list[dict[str, Any]], **settings: Any) -> str:
    result = chosen(records, **settings)
    game, updates, transitions, seed = (
        settings[k] for k in ("game", "updates", "transitions", "seed")
    )
    head = (
        "| updates | wheeler2 loss | SB3 loss | largest relative loss difference so far | "
        "parameters, wheeler2 vs SB3: relative difference | parameters, wheeler2 vs itself "
        "one ulp away | same greedy action, wheeler2 vs SB3 | same greedy action, wheeler2 "
        "vs itself one ulp away |"
    )
    lines = [head, "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in result["rows"]:
        lines.append(
            f"| {r['updates']:,} | {r['w2_loss']:.6f} | {r['sb3_loss']:.6f} | "
            f"{r['loss_rel']:.1e} | {r['param_rel']:.1e} | {r['ulp_rel']:.1e} | "
            f"{r['greedy_same']:.4f} | {r['greedy_same_ulp']:.4f} |"
        )
    eps = ["| env steps | wheeler2 epsilon | SB3 epsilon |", "| --- | --- | --- |"]
    eps += [f"| {s:,} | {a:.4f} | {b:.4f} |" for s, a, b in result["eps"]]
    return f"""# wheeler2's DQN and SB3's on the same batches

`python -m experiments.dqn_same_batches --game {game} --updates {updates} --transitions \
{transitions} --seed {seed}` ({result["seconds"]:.0f} s). Both sides start from the same weights
and take {updates:,} updates on the same batches of 32 drawn from {transitions:,} transitions of
random play on `MinAtar/{game}-v1` (the settings of `experiments/minatar_vs_sb3.py`: vanilla
targets, Huber loss, gradients clipped at 10, Adam 2.5e-4, target copied every 1,000 updates).

{chr(10).join(lines)}

Epsilon over env steps (the comparison's schedule, 1 -> 0.1 over the first 100k of 500k steps):

{chr(10).join(eps)}

Before `learning_starts`, SB3 acts uniformly at random and wheeler2 epsilon-greedily with the
schedule's epsilon (0.955 at the 5,000th step): a difference in at most 4.5% of the warm-up's
actions.
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--game", default="SpaceInvaders", choices=list(CONFIGS))
    ap.add_argument("--updates", type=int, default=5_000)
    ap.add_argument("--transitions", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--out", type=Path, default=None, help="default: results/dqn_same_batches_<game>.md"
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    out = args.out or RESULTS / f"dqn_same_batches_{args.game.lower()}.md"
    settings = {
        "game": args.game,
        "updates": args.updates,
        "transitions": args.transitions,
        "seed": args.seed,
    }
    log = out.with_name(out.stem + "_runs.jsonl")
    runs.append(log, {**settings, **compare(**settings)})
    print(report.write_from_runs(out, log, render, plot, settings, argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
