"""A3C (issue 37, agents/a3c.py): workers whose gradients update one shared set of parameters
(wheeler2/shared.py). Checked: one worker is A2C to the bit; two workers' updates land, in turn,
on the shared parameters with shared RMSProp statistics (by hand); the second worker acts with
the first one's update after its own; a team on serial and local applies every worker's
updates; the shared count survives a resume; the refusals by key."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from wheeler2.agents.a2c import A2C, Params
from wheeler2.agents.a3c import A3C

from wheeler2 import checkpoint, cli
from wheeler2.agent import SpaceInfo, Transitions
from wheeler2.config import ConfigError, load
from wheeler2.runtime import run_experiment
from wheeler2.runtime.team import prepare_team
from wheeler2.shared import SharedBlock, share

SPACE = SpaceInfo(obs_dim=3, act_dim=2, discrete=True)
PARAMS = Params(hidden=[8], n_steps=4)


def _rollout(agent: A2C, rng: np.random.Generator, steps: int = 4) -> dict | None:
    """``steps`` vector steps of one env copy with random observations and rewards."""
    metrics = None
    for t in range(steps):
        obs = rng.normal(size=(1, 3)).astype(np.float32)
        nxt = rng.normal(size=(1, 3)).astype(np.float32)
        out = agent.act(obs, explore=True)
        step = Transitions(
            obs,
            out.action,
            rng.normal(size=(1, 1)),
            nxt,
            np.array([t == 2]),
            np.array([False]),
            nxt,
            out,
        )
        metrics = agent.observe(step) or metrics
    return metrics


def test_one_worker_is_a2c_to_the_bit():
    a3c, a2c = A3C(SPACE, PARAMS, seed=1), A2C(SPACE, PARAMS, seed=1)
    block = SharedBlock.create(a3c.shared_tensors())
    try:
        share(a3c, block)
        for agent in (a3c, a2c):
            _rollout(agent, np.random.default_rng(0), 12)  # three updates
        for mine, theirs in zip(a3c.params_list, a2c.params_list):
            assert torch.equal(mine, theirs)
        assert a3c.theta is not None
        for shared, theirs in zip(a3c.theta, a2c.params_list):
            assert torch.equal(shared, theirs)
    finally:
        block.close()


def test_two_workers_apply_their_gradients_to_the_shared_parameters_in_turn():
    a, b = A3C(SPACE, PARAMS, seed=1), A3C(SPACE, PARAMS, seed=2)
    block = SharedBlock.create(a.shared_tensors())
    try:
        share(a, block)
        share(b, block)  # b takes a's initial parameters: the table's, not its own seed's
        views = block.tensors()
        theta0 = [views[f"theta/{i}"].clone() for i in range(len(a.params_list))]
        for mine, start in zip(b.params_list, theta0):
            assert torch.equal(mine, start)
        grads: dict[str, list[torch.Tensor]] = {}
        for name, worker in (("a", a), ("b", b)):

            def spy(loss, params, norm, _w=worker, _n=name):
                out = A3C.worker_grads(_w, loss, params, norm)
                grads[_n] = [g.clone() for g in out]
                return out

            worker.worker_grads = spy  # type: ignore[method-assign]
        _rollout(a, np.random.default_rng(0))  # a's update: theta0 -> theta1
        after_a = [p.detach().clone() for p in a.params_list]
        metrics = _rollout(b, np.random.default_rng(1))  # b's gradient, taken at theta0
        assert metrics is not None and metrics["shared_updates"] == 2.0
        # By hand: RMSProp's two steps on one theta with one g (the statistics shared).
        ref = [t.clone().requires_grad_(True) for t in theta0]
        opt = torch.optim.RMSprop(ref, lr=PARAMS.lr, alpha=0.99, eps=PARAMS.rms_prop_eps)
        for name in ("a", "b"):
            for r, g in zip(ref, grads[name]):
                r.grad = g
            opt.step()
        assert a.theta is not None
        for shared, want in zip(a.theta, ref):
            torch.testing.assert_close(shared.detach(), want.detach(), rtol=0, atol=1e-7)
        # b acts with both updates now; a still with its own until its next update.
        for mine, shared in zip(b.params_list, a.theta):
            assert torch.equal(mine.detach(), shared.detach())
        for mine, own in zip(a.params_list, after_a):
            assert torch.equal(mine.detach(), own)
        assert not all(torch.equal(x, y) for x, y in zip(after_a, b.params_list))
    finally:
        block.close()


def test_a_worker_evaluates_and_saves_theta_not_its_lagging_copy():
    """a updates once, then b twice: a's theta' is one update old. Its eval plays theta as the
    eval began (and leaves theta' as it was), and its state holds theta, g and the count of
    one moment, so a learner resumed from it rebuilds the block as it stood."""
    a, b = A3C(SPACE, PARAMS, seed=1), A3C(SPACE, PARAMS, seed=2)
    block = SharedBlock.create(a.shared_tensors())
    try:
        share(a, block)
        share(b, block)
        _rollout(a, np.random.default_rng(0))
        _rollout(b, np.random.default_rng(1), 8)
        assert a.theta is not None
        theta = [t.detach().clone() for t in a.theta]
        lagging = [p.detach().clone() for p in a.params_list]
        assert not all(torch.equal(x, y) for x, y in zip(theta, lagging))
        plain = A2C(SPACE, PARAMS, seed=3)  # an unshared actor with theta's weights
        with torch.no_grad():
            for p, t in zip(plain.params_list, theta):
                p.copy_(t)
        obs = np.random.default_rng(2).normal(size=(5, 3)).astype(np.float32)
        played, want = a.act(obs, explore=False), plain.act(obs, explore=False)
        np.testing.assert_array_equal(played.action, want.action)
        np.testing.assert_allclose(played.logp, want.logp, rtol=0, atol=1e-6)
        for mine, own in zip(a.params_list, lagging):  # training goes on from theta'
            assert torch.equal(mine.detach(), own)

        state = a.state_dict()
        assert state["shared_updates"] == 3
        restored = A3C(SPACE, PARAMS, seed=4)
        restored.load_state_dict(state)
        rebuilt = restored.shared_tensors()
        views = block.tensors()
        for i in range(len(theta)):
            assert torch.equal(rebuilt[f"theta/{i}"], views[f"theta/{i}"])
            assert torch.equal(rebuilt[f"g/{i}"], views[f"g/{i}"])
        assert rebuilt["updates"].tolist() == views["updates"].tolist()
    finally:
        block.close()


TEAM = """
[experiment]
name = "a3c"
seed = 0
total_steps = {total}
eval_every = {total}
eval_episodes = 1
backend = "{backend}"
progress = false
out = "{out}"

[env]
id = "CartPole-v1"

[[team]]
name = "w0"
algo = "{learner}"
role = "learner"
[team.params]
hidden = [8]

[[team]]
name = "w"
algo = "a3c"
role = "explorer"
count = 2
[team.params]
hidden = [{hidden}]
{extra}
"""


def _config(tmp_path: Path, **kw: object) -> Path:
    values: dict[str, object] = {
        "total": 600,
        "backend": "serial",
        "out": (tmp_path / "runs").as_posix(),
        "learner": "a3c",
        "hidden": "8",
        "extra": "",
    }
    values.update(kw)
    path = tmp_path / "a3c.toml"
    path.write_text(TEAM.format(**values))
    return path


@pytest.mark.parametrize("backend", ["serial", "local"])
def test_a_team_applies_every_workers_updates_to_the_shared_parameters(tmp_path, backend):
    run = run_experiment(load(_config(tmp_path, backend=backend)))
    assert json.loads((run / "summary.json").read_text())["env_steps"] == 600
    members = checkpoint.load(run / "checkpoints" / "latest.pt")["members"]
    own = sum(int(members[m]["updates"]) for m in ("w0", "w-0", "w-1"))
    # 600 steps of 1 copy, one update per 5 of a worker's steps: 120 updates (one or two fewer
    # where local's workers stop between updates), every one applied to the block.
    assert 117 <= own <= 120
    assert max(int(members[m]["shared_updates"]) for m in members) == own
    assert int(members["w0"]["updates"]) < own


def test_every_eval_plays_theta_as_it_begins_even_with_no_training_step_between(
    tmp_path, monkeypatch
):
    """Serial, 3 workers of 1 copy, eval_every 598: the learner evaluates at its last training
    step (598 steps in all); the explorers' steps 599 and 600 then update theta, and the
    learner's closing eval follows with no training step between the two evals. Serial steps
    no worker during an eval, so each eval must play theta as it stands at the eval's end (the
    closing one used to replay the 598 snapshot)."""
    import wheeler2.runtime.member as member

    played: list[tuple[int, bool]] = []
    plain = member.evaluate

    def spy(agent, env, seed, heads=None, **kwargs):
        result = plain(agent, env, seed, heads, **kwargs)
        if isinstance(agent, A3C) and agent.theta is not None:
            assert agent._eval_theta is not None
            same = all(torch.equal(x, y) for x, y in zip(agent._eval_theta, agent.theta))
            played.append((agent._shared_count(), same))
        return result

    monkeypatch.setattr(member, "evaluate", spy)
    path = _config(tmp_path)
    path.write_text(path.read_text().replace("eval_every = 600", "eval_every = 598"))
    run_experiment(load(path))
    assert [count for count, _ in played] == [118, 120]  # the closing eval after 2 updates
    assert all(same for _, same in played), played


def test_the_shared_count_and_parameters_go_on_after_a_resume(tmp_path):
    run = run_experiment(load(_config(tmp_path)))
    saved = checkpoint.load(run / "checkpoints" / "latest.pt")["members"]["w0"]
    assert saved["shared_updates"] == 120
    config = (run / "config.toml").read_text().replace("total_steps = 600", "total_steps = 1200")
    (run / "config.toml").write_text(config)
    assert cli.main(["resume", str(run)]) == 0
    again = checkpoint.load(run / "checkpoints" / "latest.pt")["members"]["w0"]
    assert again["shared_updates"] == 240


def _refused(tmp_path: Path, **kw: object) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        prepare_team(load(_config(tmp_path, **kw)), {})
    return info.value


def test_what_cannot_share_is_one_error_naming_the_key(tmp_path):
    err = _refused(tmp_path, backend="ray")
    assert (err.table, err.key) == ("[[team]] w0", "algo") and "ray" in err.message
    err = _refused(tmp_path, learner="a2c")
    assert (err.table, err.key) == ("[[team]] w", "algo") and "'a2c'" in err.message
    err = _refused(tmp_path, hidden="16")
    assert (err.table, err.key) == ("[[team]] w", "params") and "hidden" in err.message
    # Same shapes, another function: one theta cannot serve both.
    err = _refused(tmp_path, extra='activation = "relu"')
    assert (err.table, err.key) == ("[[team]] w", "params") and "activation" in err.message
    # One shared RMSProp and one critic: a worker's own step size or return has no meaning.
    err = _refused(tmp_path, extra="lr = 0.01\ngamma = 0.9")
    assert (err.table, err.key) == ("[[team]] w", "params"), err
    assert "gamma, lr differ" in err.message and "lr = 0.01 here, 0.0007 there" in err.message
    # A sync would overwrite a worker's copy mid-rollout with the learner's lagging one.
    path = _config(tmp_path)
    path.write_text(path.read_text().replace("count = 2", "count = 2\nsync = { every = 10 }"))
    with pytest.raises(ConfigError) as info:
        prepare_team(load(path), {})
    assert (info.value.table, info.value.key) == ("[[team]] w", "sync"), info.value


def test_the_shared_update_count_stays_exact_past_float32s_integers():
    """The block is float32 (exact integers up to 2^24 only): the count must not stall there."""
    from wheeler2.agents.a3c import _count, _increment

    slots = torch.tensor([15.0, 2.0**20 - 2])  # 15 * 2^20 + 2^20 - 2 = 2^24 - 2
    for _ in range(5):
        _increment(slots)
    assert _count(slots) == 2**24 + 3
