"""Exploration levers of issue 13 that live in the config: per-copy values (Ape-X's spread of
noise scales over ``count`` copies, or a list) and the actor-only role (acts with the learner's
synced weights and its own noise, never learns)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from wheeler2 import checkpoint as ckpt
from wheeler2.config import ConfigError, load, validate
from wheeler2.runtime import run_experiment
from wheeler2.runtime.parts import make_agent, space_info
from wheeler2.runtime.replays import own_replay_spec, replay_spec
from wheeler2.runtime.seeds import member_seed
from wheeler2.runtime.team import prepare_team

BASE = """
[experiment]
name = "levers"
total_steps = 600
eval_every = 600
eval_episodes = 1
backend = "serial"
progress = false

[env]
id = "Pendulum-v1"

[buffer]
capacity = 2_000
batch_size = 32

[[team]]
name = "target"
algo = "ddpg"
role = "learner"
[team.params]
learning_starts = 100
hidden = [16, 16]

[[team]]
name = "actor"
algo = "ddpg"
role = "actor"
count = {count}
sync = {{ every = 50 }}
{per_copy}
[team.params]
learning_starts = 0
hidden = [16, 16]
noise_std = 0.3
"""


def _load(tmp_path: Path, count: int = 4, per_copy: str = "", **kwargs):
    path = tmp_path / "levers.toml"
    path.write_text(textwrap.dedent(BASE.format(count=count, per_copy=per_copy)))
    return load(path, out=str(tmp_path / "runs"), **kwargs)


def _noise_stds(config) -> list[float]:
    setup = prepare_team(config, {})
    space = space_info(setup.tables[0].info, setup.heads)
    actors = [p for p in setup.plans if p.role == "actor"]
    agents = [make_agent(config, p, space, 0) for p in actors]
    return [a.noise.std for a in agents]


def test_apex_spread_gives_copy_i_base_to_the_power_one_plus_alpha_i_over_n_minus_1(tmp_path):
    config = _load(tmp_path, per_copy="per_copy = { noise_std = { base = 0.4, alpha = 7 } }")
    expected = [0.4 ** (1 + 7 * i / 3) for i in range(4)]
    assert _noise_stds(config) == pytest.approx(expected)
    assert expected[0] == pytest.approx(0.4) and expected[3] == pytest.approx(0.4**8)


def test_a_list_gives_each_copy_its_value_and_the_rest_of_params_is_shared(tmp_path):
    config = _load(tmp_path, per_copy="per_copy = { noise_std = [0.05, 0.1, 0.2, 0.8] }")
    assert _noise_stds(config) == pytest.approx([0.05, 0.1, 0.2, 0.8])
    # Without per_copy every copy takes params.
    assert _noise_stds(_load(tmp_path)) == pytest.approx([0.3] * 4)
    # The resolved config writes per_copy and reads back equal (resume rebuilds the same copies).
    again = validate(__import__("tomllib").loads(config.to_toml()), config.path)
    assert again == config


@pytest.mark.parametrize(
    "per_copy, table, message",
    [
        ("per_copy = { noise_std = [0.1, 0.2] }", "per_copy", "expected 4 values (count = 4)"),
        ("per_copy = { noise_sd = [0.1, 0.2, 0.3, 0.4] }", "per_copy", "did you mean"),
        ("per_copy = { noise_std = [0.1, -0.2, 0.3, 0.4] }", "(copy 1)", "noise_std"),
        ("per_copy = { noise_std = { alpha = 7 } }", "per_copy", "{ base = b, alpha = a }"),
        ("per_copy = { noise_std = 0.1 }", "per_copy", "a list of 4 values"),
    ],
)
def test_bad_per_copy_values_are_refused_naming_the_key(tmp_path, per_copy, table, message):
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, per_copy=per_copy)
    assert table in str(info.value) and message in str(info.value)


def test_an_actor_must_sync_and_must_not_learn_on_its_own(tmp_path):
    path = tmp_path / "a.toml"
    path.write_text(
        textwrap.dedent(BASE.format(count=1, per_copy="")).replace("sync = { every = 50 }\n", "")
    )
    with pytest.raises(ConfigError, match=r"\[\[team\]\] #2 \(actor\) sync: role = \"actor\""):
        load(path)
    text = textwrap.dedent(BASE.format(count=1, per_copy="")).replace(
        'algo = "ddpg"\nrole = "actor"', 'algo = "ppo"\nrole = "actor"'
    )
    text = text.replace("learning_starts = 0\nhidden = [16, 16]\nnoise_std = 0.3", "")
    path.write_text(text)
    with pytest.raises(ConfigError, match="'ppo' learns from its own rollouts"):
        load(path)


def test_an_actor_acts_with_synced_weights_and_never_learns(tmp_path):
    config = _load(tmp_path, count=2)
    run_dir = run_experiment(config)
    payload = ckpt.load(run_dir / "checkpoints" / "latest.pt")
    learner = payload["members"]["target"]
    assert learner["updates"] > 0
    setup = prepare_team(config, {})
    space = space_info(setup.tables[0].info, setup.heads)
    for plan in setup.plans[1:]:
        saved = payload["members"][plan.name]
        fresh = make_agent(config, plan, space, member_seed(config, plan)).state_dict()
        assert saved["updates"] == 0 and saved["env_steps"] > 0
        # Its critic is still its initial one (it never took a gradient step) ...
        for k, v in fresh["critic"].items():
            assert torch.equal(saved["critic"][k], v), k
        # ... while its actor is the learner's, taken by sync (not its own initial one).
        assert not torch.equal(saved["actor"]["head.weight"], fresh["actor"]["head.weight"])


def test_own_share_draws_that_fraction_of_each_batch_from_the_learners_own_table(
    tmp_path, monkeypatch
):
    from wheeler2.runtime.trainer import Trainer

    seen: list[tuple[int, int, int, int]] = []
    prepare = Trainer._prepare

    def spy(self):  # noqa: ANN001, ANN202
        out = prepare(self)
        _, batch, shared = out
        own = self.own.stats()["inserts"] if self.own is not None else -1
        seen.append((len(batch["index"]), shared, own, int(self.replay.stats()["inserts"])))
        return out

    monkeypatch.setattr(Trainer, "_prepare", spy)
    config = _load(tmp_path, count=1, overrides=["buffer.own_share=0.25"])
    setup = prepare_team(config, {})
    spec = own_replay_spec(config, setup.tables[0])
    assert spec.cfg.batch_size == 8 and spec.cfg.updates_per_insert == 0
    assert replay_spec(config, setup.tables[0]).cfg.batch_size == 32 - 8
    run_dir = run_experiment(config)
    steps = ckpt.load(run_dir / "checkpoints" / "latest.pt")["member_steps"]
    assert seen, "the learner never sampled"
    # Every batch is whole: 24 shared rows, then 8 of the learner's own.
    assert {(n, shared) for n, shared, _, _ in seen} == {(32, 24)}
    # The own table holds the learner's transitions only, the shared one everybody's.
    *_, (_, _, own_inserts, shared_inserts) = seen
    assert own_inserts <= steps["target"] < shared_inserts
    assert own_inserts >= steps["target"] - 64  # at most one staged chunk behind


def test_own_share_is_a_fraction_below_one(tmp_path):
    with pytest.raises(ConfigError, match=r"\[buffer\] own_share"):
        _load(tmp_path, overrides=["buffer.own_share=1.0"])
