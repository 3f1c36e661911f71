"""Image encoders in every algorithm (agents/parts/encoders.py): uint8 in and scaled inside the
net, DrQ's random shift on what learners train on and never on what they act on, and explorers
that take the learner's encoder by role. Images are tiny (2 channels of 8x8)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from wheeler2.agents.parts.encoders import ImageEncoder, image_encoder, random_shift

from wheeler2 import registry
from wheeler2.agent import Agent, Batch, SpaceInfo
from wheeler2.sync import (
    SyncPlan,
    WeightClient,
    WeightPublisher,
    check_sync,
    float_state,
    source_shapes,
)

SHAPE = (2, 8, 8)
DIM = 128
DISCRETE = SpaceInfo(obs_dim=DIM, act_dim=3, discrete=True, obs_shape=SHAPE)
BOX = SpaceInfo(obs_dim=DIM, act_dim=2, discrete=False, obs_shape=SHAPE)
OFF_POLICY = ["dqn", "ddpg", "td3", "sac"]
ON_POLICY = ["ppo", "a2c", "pg"]


def make(algo: str, space: SpaceInfo, seed: int = 0, **params: Any) -> Agent:
    cls = registry.resolve_algo(algo)
    if cls.uses_replay:
        params.setdefault("learning_starts", 0)
    return cls(space, cls.Params(hidden=[16], **params), seed=seed)


def space_of(algo: str) -> SpaceInfo:
    return DISCRETE if algo in ("dqn", "ppo", "a2c", "pg") else BOX


def pixels(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, DIM), dtype=np.uint8)


def batch(space: SpaceInfo, n: int = 6) -> Batch:
    action = np.zeros(n, np.int64) if space.discrete else np.zeros((n, space.act_dim), np.float32)
    arrays = {
        "obs": pixels(n, 1),
        "action": action,
        "reward": np.ones((n, 1), np.float32),
        "next_obs": pixels(n, 2),
        "discount": np.full(n, 0.9, np.float32),
        "weight": np.ones(n, np.float32),
        "index": np.arange(n),
    }
    return Batch.from_numpy(arrays, "cpu")


def encoders(module: torch.nn.Module) -> list[ImageEncoder]:
    return [m for m in module.modules() if isinstance(m, ImageEncoder)]


@pytest.mark.parametrize("algo", OFF_POLICY + ON_POLICY)
def test_every_algorithm_reads_images_through_an_encoder(algo):
    agent = make(algo, space_of(algo))
    assert encoders(agent.actor), f"{algo}'s actor has no image encoder"
    out = agent.act(pixels(4), explore=True)
    assert len(out.action) == 4
    if agent.uses_replay:
        metrics = agent.learn(batch(agent.space)).metrics
        assert all(np.isfinite(v) for v in metrics.values())


@pytest.mark.parametrize("algo", ["crossq", "cem"])
def test_algorithms_without_an_encoder_refuse_images(algo):
    # crossq passed check and crashed at its first update (its BatchNormQ critic got no
    # encoder, sized for features, fed pixels); cem fed 0-255 pixels to MLPs unscaled.
    cls = registry.resolve_algo(algo)
    with pytest.raises(ValueError, match="flat observations"):
        cls(BOX, cls.Params(hidden=[16]))


@pytest.mark.parametrize(
    ("algo", "extra"),
    [("ppo", {}), ("a2c", {}), ("pg", {}), ("ppo", {"core": "gru", "core_size": 8})],
    ids=["ppo", "a2c", "pg", "ppo-gru"],
)
def test_on_policy_learners_update_from_image_rollouts(algo, extra):
    import wheeler2.envs.pixels  # noqa: F401 - registers wheeler2/Catch-v0
    from wheeler2.envs.gym import GymVecEnv

    from wheeler2.agent import Transitions

    env = GymVecEnv("wheeler2/Catch-v0", {"size": 8}, 2, seed=0)
    info = env.info
    space = SpaceInfo(info.obs_dim, info.act_dim, True, obs_shape=info.obs_shape)
    params = {"n_steps": 8} | ({"batch_size": 16} if algo == "ppo" else {}) | extra
    agent = make(algo, space, encoder="small_cnn", **params)
    before = [t.detach().clone() for t in encoders(agent.actor)[0].parameters()]
    obs = env.reset().obs
    state = agent.initial_state(2) if agent.state_dim else None
    reports = []
    for _ in range(8):
        out = agent.act(obs, explore=True, state=state)
        st = env.step(out.action)
        reward = st.reward[:, None]
        step = Transitions(
            obs,
            out.action,
            reward,
            st.final_obs,
            st.terminated,
            st.truncated,
            st.obs,
            out,
            state=state,
        )
        reports.append(agent.observe(step))
        obs, state = st.obs, out.state
    env.close()
    assert any(r for r in reports), f"{algo} never updated"
    after = list(encoders(agent.actor)[0].parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after)), "the encoder did not learn"


@pytest.mark.parametrize(("algo", "core"), [("dqn", "gru"), ("td3", "lstm"), ("ppo", "gru")])
def test_recurrent_cores_read_the_encoder_features(algo, core):
    extra = {"critic_core": True} if algo == "ppo" else {}
    agent = make(algo, space_of(algo), core=core, core_size=8, **extra)
    actor = agent.actor
    assert isinstance(actor.encoder, ImageEncoder)
    assert actor.sync_roles["encoder"] == "encoder"
    assert actor.core.in_dim != DIM  # the core reads features, not 128 pixels
    state = agent.initial_state(3)
    out = agent.act(pixels(3), explore=False, state=state)
    assert out.state is not None and out.state.shape == state.shape


def test_pixels_are_scaled_inside_the_net():
    enc = image_encoder("impala", SHAPE)
    x = torch.as_tensor(pixels(3))
    # uint8 in, and the same features as the floats 0..255 (the scale is the encoder's).
    assert torch.allclose(enc(x), enc(x.float()))
    body_in = x.float().reshape(3, *SHAPE) / 255.0
    assert torch.allclose(enc(x), enc.body(body_in))
    # The body starts from [0, 1]: a mutant without the scale reads 255x larger inputs.
    assert not torch.allclose(enc.body(x.float().reshape(3, *SHAPE)), enc(x))


def test_nature_cnn_refuses_small_images_naming_the_key():
    with pytest.raises(ValueError, match=r'encoder = "nature_cnn" needs images of at least 36'):
        image_encoder("nature_cnn", SHAPE)
    assert image_encoder("nature_cnn", (4, 36, 36)).out_dim == 64  # 64 channels of 1x1
    assert image_encoder("nature_cnn", (4, 84, 84)).out_dim == 3136  # the paper's 64 x 7 x 7


def test_image_keys_are_refused_on_flat_observations_and_flat_keys_on_images():
    flat = SpaceInfo(obs_dim=4, act_dim=2, discrete=True)
    with pytest.raises(ValueError, match="encoder.*needs image observations"):
        make("dqn", flat, encoder="impala")
    with pytest.raises(ValueError, match="augment.*needs image observations"):
        make("dqn", flat, augment="shift")
    with pytest.raises(ValueError, match="normalize_obs"):
        make("dqn", DISCRETE, normalize_obs=True)
    with pytest.raises(ValueError, match="normalize_obs"):
        make("ppo", DISCRETE, normalize_obs=True)


def test_random_shift_moves_whole_images_by_at_most_pad():
    gen = torch.Generator().manual_seed(0)
    img = torch.zeros(5, *SHAPE, dtype=torch.uint8)
    img[:, :, 4, 4] = 200  # one bright pixel, both channels
    out = random_shift(img.reshape(5, -1), SHAPE, 2, gen).reshape(5, *SHAPE)
    assert out.dtype == torch.uint8
    for row in out:
        ys, xs = torch.nonzero(row[0] == 200, as_tuple=True)
        assert len(ys) == 1 and abs(int(ys) - 4) <= 2 and abs(int(xs) - 4) <= 2
        assert torch.equal(row[0], row[1])  # the channels (stacked frames) move together
    assert not all(torch.equal(out[0], o) for o in out[1:])


@pytest.mark.parametrize("algo", OFF_POLICY)
def test_augmentation_reaches_training_and_never_acting(algo, monkeypatch):
    import wheeler2.agents.offpolicy as base
    import wheeler2.agents.parts.encoders as parts

    agent = make(algo, space_of(algo), augment="shift", seed=3)
    plain = make(algo, space_of(algo), seed=3)
    obs = pixels(8, 5)
    calls: list[int] = []
    real_shift = parts.random_shift

    def counted(*args: Any) -> torch.Tensor:
        calls.append(1)
        return real_shift(*args)

    monkeypatch.setattr(base, "random_shift", counted)
    monkeypatch.setattr(parts, "random_shift", counted)
    # Acting and evaluating see the raw images: the same actions as the same net without it,
    # and no shift drawn at all.
    a = agent.act(obs, explore=False).action
    np.testing.assert_array_equal(a, plain.act(obs, explore=False).action)
    agent.act(obs, explore=True)
    assert not calls, "acting shifted its observations"
    seen: dict[str, torch.Tensor] = {}
    real_update = agent.update

    def spy(v: Any) -> Any:
        seen["obs"] = v.obs if hasattr(v, "obs") else v.read(torch.nn.Identity())
        return real_update(v)

    monkeypatch.setattr(agent, "update", spy)
    b = batch(agent.space, 16)
    agent.learn(b)
    assert seen["obs"].shape == b.obs.shape
    assert not torch.equal(seen["obs"], b.obs), "the learner trained on unshifted images"
    assert calls
    # And the act after training still reads the raw images (no state left behind).
    with torch.no_grad():
        again = agent.act(obs, explore=False).action
    assert again.shape == a.shape


def test_dqn_learner_seeds_a_ppo_explorer_encoder_and_all():
    learner = make("dqn", DISCRETE, seed=1, encoder="impala")
    explorer = make("ppo", DISCRETE, seed=2, encoder="impala", activation="relu")
    mine = encoders(explorer.actor)[0]
    theirs = encoders(learner.actor)[0]
    assert not torch.equal(mine.body[0].weight, theirs.body[0].weight)
    check_sync(learner.actor, explorer.actor, ["actor.head"], "explorer")
    with WeightPublisher.create(learner.actor) as pub:
        client = WeightClient.attach(pub.handle(), explorer.actor, keep=["head"], alpha=1.0)
        pub.publish(learner.actor)
        client.pull()
        client.close()
    for (name, a), (_, b) in zip(mine.state_dict().items(), theirs.state_dict().items()):
        assert torch.equal(a, b), f"the explorer did not take the learner's encoder ({name})"
    assert any(n.startswith("trunk.0.body") for n in client.synced)
    # The explorer now acts on the learner's features: same encoder output on the same pixels.
    x = torch.as_tensor(pixels(2))
    assert torch.equal(mine(x), theirs(x))


def test_a_recurrent_learner_publishes_its_encoder_role():
    learner = make("td3", BOX, seed=1, core="gru", core_size=8)
    explorer = make("td3", BOX, seed=2, core="gru", core_size=8)
    plan = SyncPlan(source_shapes(learner.actor), explorer.actor, [], 1.0, "explorer")
    assert any(n.startswith("encoder.") for n in plan.names)
    plan.apply(float_state(learner.actor))
    for a, b in zip(learner.actor.encoder.parameters(), explorer.actor.encoder.parameters()):
        assert torch.equal(a, b)


def test_encoder_kinds_differing_are_refused_by_check_sync():
    from wheeler2.sync import SyncError

    learner = make("dqn", DISCRETE, encoder="impala")
    explorer = make("ppo", DISCRETE, encoder="small_cnn", activation="relu")
    with pytest.raises(SyncError):
        check_sync(learner.actor, explorer.actor, [], "explorer")


@pytest.mark.parametrize("algo", ["dqn", "td3"])
def test_a_recurrent_learner_shifts_each_sequence_as_one(algo):
    # next_obs[t] and obs[t + 1] are the same frame: a recurrent learner's shift is one offset
    # per sequence, shared by its obs and next obs at every step, so the core sees no jitter
    # along the sequence; different sequences still move differently.
    agent = make(algo, space_of(algo), core="gru", core_size=8, augment="shift", shift_pad=1)
    b, t = 16, 5
    img = torch.zeros(b, t + 1, *SHAPE, dtype=torch.uint8)
    for s in range(t + 1):
        img[:, s, :, 2 + s % 4, 4] = 100 + s  # a bright pixel moving down over time
    flat = img.reshape(b, t + 1, -1)
    space = agent.space
    act = torch.zeros(b, t, dtype=torch.int64) if space.discrete else torch.zeros(b, t, 2)
    seq = Batch(
        obs=flat[:, :-1],
        action=act,
        reward=torch.ones(b, t, 1),
        next_obs=flat[:, 1:],
        discount=torch.full((b, t), 0.9),
        weight=torch.ones(b),
        index=np.arange(b),
    )
    out = agent.shifted(seq)
    assert torch.equal(out.next_obs[:, :-1], out.obs[:, 1:])
    # One offset per sequence: every step's pixel moved by the same (dy, dx) as its first.
    shifts = set()
    for i in range(b):
        moves = set()
        for s in range(t):
            frame = out.obs[i, s].reshape(SHAPE)[0]
            ys, xs = torch.nonzero(frame == 100 + s, as_tuple=True)
            assert len(ys) == 1
            moves.add((int(ys) - (2 + s % 4), int(xs) - 4))
        assert len(moves) == 1, f"sequence {i} jitters: {moves}"
        shifts |= moves
    assert len(shifts) > 1
    # A step learner still shifts each row (and obs, next obs) on its own.
    step = make(algo, space_of(algo), augment="shift", seed=0)
    rows = step.shifted(batch(step.space, 16))
    assert rows.obs.shape == (16, DIM)


@pytest.mark.parametrize(
    "override, key",
    [
        ('team.dqn.params.encoder="nature_cnn"', "params.encoder"),  # 8x8 images
        ("team.dqn.params.normalize_obs=true", "params.normalize_obs"),
    ],
)
def test_check_names_the_params_key_an_image_member_cannot_take(override, key):
    from pathlib import Path

    from wheeler2.config import ConfigError, load
    from wheeler2.runtime.team import prepare_team

    path = Path(__file__).resolve().parents[1] / "cfg" / "catch_pixels.toml"
    with pytest.raises(ConfigError) as info:
        prepare_team(load(path, overrides=[override]), {})
    assert (info.value.table, info.value.key) == ("[[team]] dqn", key), info.value
    assert not info.value.message.startswith(key.removeprefix("params.") + ":")  # said once
