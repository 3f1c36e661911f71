"""The evolutionary member (issue 37, agents/cem.py): CEM's update by hand, the elite chosen by
episode return, the learner's actor injected through the weight sync (ERL), the learner's
critic pulled and climbed by part of each generation (CEM-RL), the population and the
distribution through a checkpoint, the config's refusals, and short team runs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from wheeler2.agents.cem import CEM, Params
from wheeler2.agents.parts.evolution import SepCEM, flat
from wheeler2.agents.td3 import TD3
from wheeler2.agents.td3 import Params as TD3Params

from wheeler2 import checkpoint, cli
from wheeler2.agent import SpaceInfo, Transitions
from wheeler2.config import ConfigError, load
from wheeler2.runtime import run_experiment
from wheeler2.runtime.team import prepare_team
from wheeler2.sync import WeightClient, WeightPublisher, check_pulls, publish_view, sync_target

SPACE = SpaceInfo(obs_dim=3, act_dim=1, discrete=False)


def _cem(**kw: object) -> CEM:
    values: dict[str, object] = {"hidden": [4], "pop_size": 4, "elites": 2}
    values.update(kw)
    return CEM(SPACE, Params(**values), seed=3)  # type: ignore[arg-type]


def _play(agent: CEM, returns: list[float], obs: np.ndarray | None = None) -> dict | None:
    """One env copy plays one one-step episode per individual, with these returns in order;
    the metrics of the generation's end."""
    x = np.zeros((1, 3), np.float32) if obs is None else obs
    metrics = None
    for r in returns:
        out = agent.act(x, explore=True)
        step = Transitions(
            x, out.action, np.array([[r]]), x, np.array([True]), np.array([False]), x, out
        )
        metrics = agent.observe(step) or metrics
    return metrics


# -- CEM's update ------------------------------------------------------------------------------


def test_the_update_by_hand_moves_toward_the_elites_by_fitness():
    mean = torch.zeros(2)
    cem = SepCEM(mean, 4, 2, sigma_init=1.0, damp=0.1, damp_limit=0.0, damp_tau=0.5, seed=0)
    x = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0], [-1.0, -1.0]])
    order = cem.tell(x, torch.tensor([0.5, 2.0, 1.0, -3.0]))
    assert order.tolist() == [1, 2, 0, 3]  # best first
    w1, w2 = math.log(3 / 1), math.log(3 / 2)
    l1, l2 = w1 / (w1 + w2), w2 / (w1 + w2)
    want_mean = l1 * np.array([0.0, 2.0]) + l2 * np.array([3.0, 3.0])
    # The variance is taken around the old mean (0), plus the damping, which then decays.
    want_var = l1 * np.array([0.0, 4.0]) + l2 * np.array([9.0, 9.0]) + 0.1
    np.testing.assert_allclose(cem.mean.numpy(), want_mean, rtol=1e-12)
    np.testing.assert_allclose(cem.var.numpy(), want_var, rtol=1e-12)
    assert cem.damp == pytest.approx(0.05)


def test_samples_are_drawn_around_the_mean_with_the_variance():
    cem = SepCEM(torch.tensor([5.0, -5.0]), 4000, 2, 0.25, 0.0, 0.0, 1.0, seed=1)
    x = cem.ask().double()
    np.testing.assert_allclose(x.mean(0).numpy(), [5.0, -5.0], atol=0.05)
    np.testing.assert_allclose(x.std(0).numpy(), [0.5, 0.5], atol=0.05)


def test_the_elite_of_a_generation_is_the_top_by_episode_return():
    agent = _cem(sigma_init=0.5)
    agent.act(np.zeros((1, 3), np.float32), explore=True)  # draws the first generation
    played = torch.stack([flat(net) for net in agent.pop])
    before = agent.cem.mean.clone()
    metrics = _play(agent, [1.0, 7.0, -2.0, 4.0])  # individual k gets the k-th return
    assert metrics is not None and metrics["fitness_best"] == 7.0
    assert metrics["fitness_elite"] == pytest.approx(5.5)
    w1, w2 = math.log(3), math.log(1.5)
    want = (w1 * played[1].double() + w2 * played[3].double()) / (w1 + w2)
    torch.testing.assert_close(agent.cem.mean, want)
    assert not torch.equal(agent.cem.mean, before)
    # Evaluation plays the new mean.
    torch.testing.assert_close(flat(agent.mean_net), want.float())


def test_fitness_is_the_mean_return_over_episodes_and_over_steps():
    agent = _cem(episodes=2, pop_size=2, elites=1)
    agent.act(np.zeros((1, 3), np.float32), explore=True)
    played = [flat(net) for net in agent.pop]
    # Individual 0 plays twice (returns 1 and 5), then individual 1 twice (4 and 4).
    metrics = _play(agent, [1.0, 5.0, 4.0, 4.0])
    assert metrics is not None and metrics["fitness_best"] == 4.0
    assert metrics["fitness_mean"] == pytest.approx(3.5)
    torch.testing.assert_close(agent.cem.mean.float(), played[1])


def test_a_copy_with_nobody_left_to_play_plays_the_mean_and_gives_no_fitness():
    agent = _cem(pop_size=2, elites=1, sigma_init=0.5)
    x = np.zeros((3, 3), np.float32)
    agent.act(x, explore=True)
    roster = agent.roster
    assert roster is not None and roster.playing.tolist() == [0, 1, -1]
    mean_action = agent.mean_net(torch.as_tensor(x[2:])).detach().numpy()
    np.testing.assert_allclose(agent.act(x, explore=True).action[2:], mean_action)
    # Copy 2 (the mean) ends an episode with a huge return: nobody's fitness.
    out = agent.act(x, explore=True)
    ended = np.array([False, False, True])
    reward = np.array([[0.0], [0.0], [1e6]])
    step = Transitions(x, out.action, reward, x, ended, np.zeros(3, bool), x, out)
    assert agent.observe(step) is None and roster.returns.tolist() == [0.0, 0.0]
    # Copies 0 and 1 end theirs: the generation is told, the best is actor 1's 3.0.
    out = agent.act(x, explore=True)
    ended = np.array([True, True, False])
    reward = np.array([[2.0], [3.0], [0.0]])
    step = Transitions(x, out.action, reward, x, ended, np.zeros(3, bool), x, out)
    metrics = agent.observe(step)
    assert metrics is not None and metrics["fitness_best"] == 3.0
    assert roster.playing.tolist() == [0, 1, -1]  # the next generation, copy 2 mid-episode


# -- ERL: the learner's actor joins the population through the weight sync --------------------


def _td3() -> TD3:
    return TD3(SPACE, TD3Params(hidden=[4], learning_starts=0), seed=7)


def test_the_learners_actor_is_injected_through_the_sync_and_competes():
    learner, agent = _td3(), _cem(inject=True, sigma_init=1e-4)
    pub = WeightPublisher.create(publish_view(learner, ()))
    try:
        pub.publish(publish_view(learner, ()))
        with WeightClient.attach(pub.handle(), sync_target(agent), [], 1.0, "pop") as client:
            assert client.pull() == 1
            agent.act(np.zeros((1, 3), np.float32), explore=True)
            theirs = flat(learner.actor_net)
            # The first actor centres the distribution and is played as the last individual.
            torch.testing.assert_close(flat(agent.pop[-1]), theirs)
            torch.testing.assert_close(agent.cem.mean.float(), theirs)
            metrics = _play(agent, [0.0, 0.0, 0.0, 9.0])
            assert metrics is not None and metrics["injected_rank"] == 0.0
            # Nothing new published: the next generation has no injected actor.
            assert agent.injected_at is None
            assert "injected_rank" not in (_play(agent, [1.0, 2.0, 3.0, 4.0]) or {})
            # A new actor published and pulled: injected again.
            with torch.no_grad():
                learner.actor_net.head.bias.add_(1.0)
            pub.publish(publish_view(learner, ()))
            assert client.pull() == 2
            _play(agent, [1.0, 2.0, 3.0, 4.0])
            torch.testing.assert_close(flat(agent.pop[-1]), flat(learner.actor_net))
            assert agent.injected_at == 3
    finally:
        pub.close()


# -- CEM-RL: part of each generation climbs the learner's critic ------------------------------


def test_the_critic_and_actor_are_pulled_by_name_and_the_steps_move_half_the_actors():
    learner = _td3()
    agent = _cem(grad_share=0.5, grad_steps=20, grad_starts=0, grad_batch=8, inject=True)
    assert check_pulls(learner, agent, [], "pop") == ("critic", "actor")
    view = publish_view(learner, ("critic", "actor"))
    pub = WeightPublisher.create(view)
    try:
        pub.publish(view)
        with WeightClient.attach(pub.handle(), sync_target(agent), [], 1.0, "pop") as client:
            client.pull()
        torch.testing.assert_close(flat(agent.critic), flat(learner.critic))
        torch.testing.assert_close(flat(agent.slot), flat(learner.actor_net))
    finally:
        pub.close()
    obs = np.random.default_rng(0).normal(size=(1, 3)).astype(np.float32)
    agent.act(obs, explore=True)
    _play(agent, [1.0, 2.0, 3.0, 4.0], obs)  # fills the window of states
    critic_before = flat(agent.critic)
    _play(agent, [1.0, 2.0, 3.0, 4.0], obs)  # generation 3 is drawn with 8 states known
    metrics = _play(agent, [1.0, 2.0, 3.0, 4.0], obs)
    # Its two stepped actors climbed the critic (their mean Q rose); see the next test for
    # which actors moved.
    assert metrics is not None and metrics["cemrl_q_gain"] > 0.0
    torch.testing.assert_close(flat(agent.critic), critic_before)  # never trained here


def _spied(agent: CEM) -> list[torch.Tensor]:
    """Every generation CEM draws for ``agent``, as drawn (before any step on the critic)."""
    draws: list[torch.Tensor] = []
    ask = agent.cem.ask

    def spy() -> torch.Tensor:
        draws.append(ask().clone())
        return draws[-1].clone()

    agent.cem.ask = spy  # type: ignore[method-assign]
    return draws


def test_a_ddpg_learners_single_critic_is_pulled_and_climbed():
    from wheeler2.agents.ddpg import DDPG
    from wheeler2.agents.ddpg import Params as DDPGParams

    learner = DDPG(SPACE, DDPGParams(hidden=[4], learning_starts=0), seed=7)
    agent = _cem(grad_share=0.5, grad_steps=5, grad_starts=0, grad_batch=2, critic_pair=False)
    assert check_pulls(learner, agent, [], "pop") == ("critic",)
    view = publish_view(learner, ("critic",))
    pub = WeightPublisher.create(view)
    try:
        pub.publish(view)
        with WeightClient.attach(pub.handle(), sync_target(agent), [], 1.0, "pop") as client:
            client.pull()
    finally:
        pub.close()
    torch.testing.assert_close(flat(agent.critic), flat(learner.critic))
    s = torch.ones(2, 3)
    a = agent.pop[0](s)
    torch.testing.assert_close(agent._q(s, a), learner.critic(s, a)[:, 0])
    before = flat(agent.pop[0])
    agent.states[:2] = 1.0
    agent.size = 2
    with torch.no_grad():  # as under act(), which may hand a copy an actor still to step
        agent._climb(agent.pop[0])
    assert not torch.equal(flat(agent.pop[0]), before)


@pytest.mark.parametrize(("share", "stepped"), [(0.5, {0, 1}), (0.0, set())])
def test_stepped_actors_differ_from_their_draw_and_the_others_do_not(share, stepped):
    agent = _cem(grad_share=share, grad_steps=10, grad_starts=0, grad_batch=4)
    draws = _spied(agent)
    obs = np.ones((1, 3), np.float32)
    agent.act(obs, explore=True)  # generation 1: no states yet, nobody steps
    _play(agent, [1.0, 2.0, 3.0, 4.0], obs)  # generation 2 drawn with 4 states known
    # Actors 0-2 of generation 2 played, 3 playing: each stepped one took its steps as it began.
    _play(agent, [1.0, 2.0, 3.0], obs)
    assert len(draws) == 2
    for k in range(4):
        moved = not torch.equal(flat(agent.pop[k]), draws[-1][k])
        assert moved == (k in stepped), k


# -- checkpoints -------------------------------------------------------------------------------


def test_population_and_distribution_survive_a_checkpoint_and_go_on_alike(tmp_path):
    agent = _cem(grad_share=0.5, grad_steps=3, grad_starts=0, grad_batch=2, episodes=2)
    obs = np.ones((1, 3), np.float32)
    agent.act(obs, explore=True)
    _play(agent, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], obs)
    _play(agent, [1.0, 2.0, 3.0], obs)  # mid-generation: one actor played one of two episodes
    path = tmp_path / "cem.pt"
    checkpoint.save(path, {"members": {"pop": agent.state_dict()}})
    back = _cem(grad_share=0.5, grad_steps=3, grad_starts=0, grad_batch=2, episodes=2)
    back.load_state_dict(checkpoint.load(path)["members"]["pop"])
    torch.testing.assert_close(back.cem.mean, agent.cem.mean)
    torch.testing.assert_close(back.cem.var, agent.cem.var)
    for a, b in zip(agent.pop, back.pop):
        torch.testing.assert_close(flat(a), flat(b))
    assert back.generation == agent.generation
    # Both go on from here (the uninterrupted one restarts its episode too, as a resumed
    # member's envs do) and draw the same next generation.
    agent.load_state_dict(agent.state_dict())
    rest = [4.0, 5.0, 6.0, 7.0, 8.0]
    ma, mb = _play(agent, rest, obs), _play(back, rest, obs)
    assert ma == mb
    for a, b in zip(agent.pop, back.pop):
        torch.testing.assert_close(flat(a), flat(b))


# -- the config's rules ------------------------------------------------------------------------

TEAM = """
[experiment]
name = "cem"
total_steps = {total}
eval_every = {total}
eval_episodes = 1
backend = "{backend}"
progress = false
out = "{out}"

[env]
id = "Pendulum-v1"

[buffer]
capacity = 5_000
batch_size = 16
prioritized = false

[[team]]
name = "target"
algo = "td3"
role = "learner"
[team.params]
hidden = [8]
learning_starts = 100

[[team]]
name = "pop"
algo = "cem"
role = "{role}"
{sync}
[team.params]
hidden = [8]
{extra}
"""


def _config(tmp_path: Path, **kw: object) -> Path:
    values: dict[str, object] = {
        "total": 2_000,
        "backend": "serial",
        "out": (tmp_path / "runs").as_posix(),
        "role": "explorer",
        "sync": "sync = { every = 200 }",
        "extra": "pop_size = 2\nelites = 1\ninject = true\ngrad_share = 0.5\ngrad_steps = 5\n"
        "grad_starts = 200",
    }
    values.update(kw)
    path = tmp_path / "cem.toml"
    path.write_text(TEAM.format(**values))
    return path


def _refused(tmp_path: Path, **kw: object) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        prepare_team(load(_config(tmp_path, **kw)), {})
    return info.value


def test_what_the_member_cannot_do_is_one_error_naming_the_key(tmp_path):
    err = _refused(tmp_path, sync="")
    assert (err.table, err.key) == ("[[team]] pop", "sync") and "inject" in err.message
    err = _refused(tmp_path, extra="pop_size = 2\nelites = 3")
    assert (err.table, err.key) == ("[[team]] pop", "elites") and "pop_size = 2" in err.message
    with pytest.raises(ConfigError) as info:  # the reader's rule for on-policy learners
        load(_config(tmp_path, role="actor", extra=""))
    assert info.value.key == "role" and 'role = "explorer"' in info.value.message
    err = _refused(tmp_path, extra="grad_share = 0.5\ncritic_pair = false")
    assert (err.table, err.key) == ("[[team]] pop", "sync") and "critic" in err.message


def test_a_sync_that_takes_nothing_is_refused_before_it_overwrites_the_mean(tmp_path):
    """Without inject or grad_share the sync target is the distribution's mean itself: each
    pull would put the learner's actor where evaluation and filler episodes play the mean."""
    learner, agent = _td3(), _cem(sigma_init=0.5)
    pub = WeightPublisher.create(publish_view(learner, ()))
    try:
        pub.publish(publish_view(learner, ()))
        with WeightClient.attach(pub.handle(), sync_target(agent), [], 1.0, "pop") as client:
            client.pull()
    finally:
        pub.close()
    assert torch.equal(flat(agent.mean_net), flat(learner.actor_net))  # what it would do
    err = _refused(tmp_path, extra="pop_size = 2\nelites = 1")
    assert (err.table, err.key) == ("[[team]] pop", "sync")
    assert "inject" in err.message and "grad_share" in err.message
    # Without sync the same member is a plain population beside the learner.
    prepare_team(load(_config(tmp_path, sync="", extra="pop_size = 2\nelites = 1")), {})


def test_a_grad_share_that_steps_no_actor_is_refused(tmp_path):
    """round(0.2 * 2) = 0: CEM-RL asked for, plain CEM run, the critic pulled for nothing."""
    agent = _cem(pop_size=2, elites=1, grad_share=0.2, grad_starts=0, grad_batch=1)
    agent.act(np.zeros((1, 3), np.float32), explore=True)
    _play(agent, [1.0, 2.0])
    assert agent.climb == []  # what it would do
    err = _refused(tmp_path, extra="pop_size = 2\nelites = 1\ngrad_share = 0.2")
    assert (err.table, err.key) == ("[[team]] pop", "grad_share") and "0.5" in err.message


@pytest.mark.parametrize(
    "sync, what",
    [
        ("sync = { every = 200, alpha = 0.5 }", "alpha = 0.5"),
        ('sync = { every = 200, keep = ["actor/head"] }', "keep"),
    ],
)
def test_a_blend_or_a_kept_layer_of_modules_taken_whole_is_refused(tmp_path, sync, what):
    """alpha 0.5 would make the pulled critic half the member's untrained copy, and the
    injected actor half its own random one; keep would leave its random head on both."""
    err = _refused(tmp_path, sync=sync)
    assert (err.table, err.key) == ("[[team]] pop", "sync"), err
    assert what in err.message and "critic, actor whole" in err.message


def test_a_normalizing_learner_is_refused_with_a_fix_the_population_can_take(tmp_path):
    """cem has no normalize_obs key, so the refusal must name the learner's as a way out."""
    path = _config(tmp_path)
    path.write_text(
        path.read_text().replace(
            "learning_starts = 100", "learning_starts = 100\nnormalize_obs = true"
        )
    )
    with pytest.raises(ConfigError) as info:
        prepare_team(load(path), {})
    assert info.value.table == "[[team]] pop" and "normalize_obs = false in the learner's" in str(
        info.value
    )


def test_a_population_learner_cannot_inject(tmp_path):
    path = tmp_path / "alone.toml"
    text = TEAM.format(
        total=100, backend="serial", out=tmp_path, role="explorer", sync="", extra=""
    )
    head, _, _ = text.partition('[[team]]\nname = "target"')
    path.write_text(
        head + '[[team]]\nname = "pop"\nalgo = "cem"\nrole = "learner"\n'
        "[team.params]\nhidden = [8]\ninject = true\n"
    )
    with pytest.raises(ConfigError) as info:
        prepare_team(load(path), {})
    assert (info.value.table, info.value.key) == ("[[team]] pop", "inject")


# -- runs --------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["serial", "local"])
def test_a_td3_and_cemrl_team_runs_evolves_and_resumes(tmp_path, backend):
    path = _config(tmp_path, backend=backend)
    run = run_experiment(load(path))
    assert json.loads((run / "summary.json").read_text())["env_steps"] == 2_000
    rows = (run / "metrics.csv").read_text().splitlines()
    pop = {r.split(",")[3] for r in rows if r.split(",")[2] == "pop"}
    assert {"generation", "fitness_best", "injected_rank", "cemrl_q_gain"} <= pop
    saved = checkpoint.load(run / "checkpoints" / "latest.pt")["members"]["pop"]
    assert saved["algo"] == "cem" and saved["generation"] >= 2
    assert saved["population"].shape[0] == 2
    # Resumed for 1,000 more steps: the member goes on from its saved generation (its state
    # came through the backend's transport into the checkpoint and back).
    config = (run / "config.toml").read_text().replace("total_steps = 2000", "total_steps = 3000")
    (run / "config.toml").write_text(config)
    assert cli.main(["resume", str(run)]) == 0
    again = checkpoint.load(run / "checkpoints" / "latest.pt")["members"]["pop"]
    assert again["generation"] >= saved["generation"] + 1
    assert again["env_steps"] > saved["env_steps"]


def test_the_population_alone_learns_and_is_evaluated_on_its_mean(tmp_path):
    path = tmp_path / "alone.toml"
    path.write_text(
        f"""
[experiment]
name = "alone"
total_steps = 1_000
eval_every = 1_000
eval_episodes = 1
backend = "serial"
progress = false
out = "{tmp_path.as_posix()}"
[env]
id = "Pendulum-v1"
[[team]]
name = "pop"
algo = "cem"
role = "learner"
[team.params]
hidden = [8]
pop_size = 2
elites = 1
"""
    )
    summary = json.loads((run_experiment(load(path)) / "summary.json").read_text())
    assert summary["env_steps"] == 1_000 and summary["eval"]


@pytest.mark.parametrize("eval_actor", ["mean", "champion"])
def test_evaluation_plays_the_mean_or_the_last_generations_champion(eval_actor):
    agent = _cem(sigma_init=0.5, eval_actor=eval_actor)
    x = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    before = agent.act(x, explore=False).action  # no generation ended: the mean either way
    np.testing.assert_allclose(before, agent.mean_net(torch.as_tensor(x)).detach().numpy())
    agent.act(np.zeros((1, 3), np.float32), explore=True)
    played = [net(torch.as_tensor(x)).detach().numpy() for net in agent.pop]
    _play(agent, [1.0, -2.0, 7.0, 4.0])  # individual 2 is the champion
    got = agent.act(x, explore=False).action
    want = played[2] if eval_actor == "champion" else agent.mean_net(torch.as_tensor(x)).detach()
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-6)
    assert not np.allclose(played[2], agent.mean_net(torch.as_tensor(x)).detach().numpy())
    # The champion goes through a checkpoint.
    again = _cem(sigma_init=0.5, eval_actor=eval_actor)
    again.load_state_dict(agent.state_dict())
    np.testing.assert_allclose(again.act(x, explore=False).action, got, rtol=1e-6)
