"""Gymnasium adapter: ``num_envs`` copies of one env id as a :class:`wheeler2.env.VecEnv`.

The copies are stepped in this process by a plain loop: gymnasium's own vector envs merge
per-copy infos into dicts of arrays on every step, which costs more than the loop itself for the
small control envs we run.
"""

from __future__ import annotations

import pickle
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from wheeler2.envs.spaces import ObsFlattener, box_bounds, flat_dim, is_goal_space, scale_box_action

from wheeler2.env import EnvInfo, EnvReset, EnvStep

# ``[env] wrappers`` as the registry hands them over: (``"module:Name"``, kwargs) pairs.
Wrappers = Sequence[tuple[str, dict[str, Any]]]


class GymVecEnv:
    """``num_envs`` copies of ``gymnasium.make(env_id, **kwargs)`` with autoreset.

    Continuous actions arrive in ``[-1, 1]`` and are mapped linearly onto the Box bounds (clipped
    first, so an exploring policy can never send an out-of-range action to the env).
    ``wrappers`` wrap each copy in order (the first innermost) before anything here reads its
    spaces, so flattening and action scaling see the wrapped env.
    """

    def __init__(
        self,
        env_id: str,
        kwargs: dict[str, Any],
        num_envs: int,
        seed: int,
        wrappers: Wrappers = (),
    ) -> None:
        self.env_id = env_id
        self.num_envs = num_envs
        self._seed = seed
        self.envs = [
            wrapped(self._make_one(env_id, kwargs), wrappers, env_id) for _ in range(num_envs)
        ]
        obs_space = self.envs[0].observation_space
        act_space = self.envs[0].action_space
        self.goal = is_goal_space(obs_space)
        if self.goal:
            self._flat = ObsFlattener(obs_space["observation"])
            goal_dim = flat_dim(obs_space["desired_goal"])
        else:
            self._flat = ObsFlattener(obs_space)
            goal_dim = 0
        if isinstance(act_space, spaces.Box):
            self.discrete = False
            act_dim = int(np.prod(act_space.shape))
            self._low, self._high = box_bounds(env_id, act_space)
            self._act_shape = act_space.shape
        elif isinstance(act_space, spaces.Discrete):
            self.discrete = True
            act_dim = int(act_space.n)
            self._act_start = int(act_space.start)
        else:
            raise TypeError(
                f"{env_id}: unsupported action space {act_space!r}: expected Box or Discrete"
            )
        spec = self.envs[0].spec
        self.info = EnvInfo(
            obs_dim=self._flat.dim,
            obs_shape=self._flat.image_shape,
            act_dim=act_dim,
            discrete=self.discrete,
            goal_dim=goal_dim,
            max_episode_steps=None if spec is None else spec.max_episode_steps,
        )
        self._obs = np.zeros((num_envs, self._flat.dim), self._flat.dtype)
        self._ag = np.zeros((num_envs, goal_dim), np.float32) if self.goal else None
        self._dg = np.zeros((num_envs, goal_dim), np.float32) if self.goal else None
        self.observation_space = obs_space
        self.action_space = act_space

    # -- helpers ---------------------------------------------------------------------------------
    def _make_one(self, env_id: str, kwargs: dict[str, Any]) -> gym.Env:
        """One copy; adapters built on this one (envs/mo.py) wrap it here."""
        from wheeler2 import registry

        # "./myenv.py:MyEnv-v0" or "./myenv.py:MyEnv": imported (and registered) here too, since
        # a member's process starts without the driver's imports.
        return gym.make(registry.gymnasium_id(env_id), **kwargs)

    def _store(
        self, i: int, raw: Any, obs: np.ndarray, ag: np.ndarray | None, dg: np.ndarray | None
    ) -> None:
        if self.goal:
            self._flat(raw["observation"], obs[i])
            ag[i] = np.asarray(raw["achieved_goal"], np.float32).reshape(-1)
            dg[i] = np.asarray(raw["desired_goal"], np.float32).reshape(-1)
        else:
            self._flat(raw, obs[i])

    def _to_env_action(self, action: np.ndarray) -> list[Any]:
        if self.discrete:
            return [int(a) + self._act_start for a in np.asarray(action).reshape(self.num_envs)]
        scaled = scale_box_action(action, self._low, self._high)
        # One cast and reshape for all copies; the copies get row views of it.
        return list(scaled.reshape(self.num_envs, *self._act_shape))

    # -- VecEnv ----------------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> EnvReset:
        base = self._seed if seed is None else seed
        for i, env in enumerate(self.envs):
            raw, _ = env.reset(seed=base + i)
            env.action_space.seed(base + i)
            self._store(i, raw, self._obs, self._ag, self._dg)
        return EnvReset(
            obs=self._obs.copy(),
            achieved_goal=None if self._ag is None else self._ag.copy(),
            desired_goal=None if self._dg is None else self._dg.copy(),
        )

    def step(self, action: np.ndarray) -> EnvStep:
        n = self.num_envs
        reward = np.zeros(n, np.float32)
        terminated = np.zeros(n, bool)
        truncated = np.zeros(n, bool)
        infos: list[dict[str, Any]] = []
        final_obs = np.empty_like(self._obs)
        final_ag = None if self._ag is None else np.empty_like(self._ag)
        final_dg = None if self._dg is None else np.empty_like(self._dg)
        for i, (env, a) in enumerate(zip(self.envs, self._to_env_action(action))):
            raw, r, term, trunc, info = env.step(a)
            reward[i] = r
            terminated[i] = term
            truncated[i] = trunc and not term
            self._store(i, raw, final_obs, final_ag, final_dg)
            if term or trunc:
                raw, _ = env.reset()
                self._store(i, raw, self._obs, self._ag, self._dg)
            else:
                self._obs[i] = final_obs[i]
                if self.goal:
                    self._ag[i] = final_ag[i]
                    self._dg[i] = final_dg[i]
            infos.append(info)
        return EnvStep(
            obs=self._obs.copy(),
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            final_obs=final_obs,
            infos=infos,
            achieved_goal=None if self._ag is None else self._ag.copy(),
            desired_goal=None if self._dg is None else self._dg.copy(),
            final_achieved_goal=final_ag,
            final_desired_goal=final_dg,
        )

    def compute_reward(
        self, achieved_goal: np.ndarray, desired_goal: np.ndarray, info: Any = None
    ) -> np.ndarray:
        """The env's own vectorized goal reward (GoalEnv.compute_reward), for HER relabelling."""
        return np.asarray(
            self.envs[0].unwrapped.compute_reward(achieved_goal, desired_goal, info), np.float32
        )

    def set_curriculum_stage(self, stage: int) -> None:
        """``[curriculum]``: the stage goes to each copy's env through its wrappers (a wrapper
        may define the method itself); an env without it raises AttributeError."""
        for env in self.envs:
            env.get_wrapper_attr("set_curriculum_stage")(stage)

    def close(self) -> None:
        for env in self.envs:
            env.close()


def wrapped(env: gym.Env, wrappers: Wrappers, env_id: str) -> gym.Env:
    """``env`` inside each of ``wrappers`` in turn: ``Name(env, **kwargs)``.

    The config reader resolved each spec already; what fails only now (a wrapper that refuses
    this env's spaces, a file changed since) is a ConfigError naming the entry."""
    from wheeler2 import registry

    for i, (spec, kwargs) in enumerate(wrappers):
        try:
            factory = registry.resolve_object(spec)
            env = factory(env, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the user's wrapper (or its file) failed
            from wheeler2.config import ConfigError

            env.close()
            # A CodeError's text is its located line; any other exception gets located here.
            text = str(exc if isinstance(exc, registry.RegistryError) else registry.code_error(exc))
            name = spec.rpartition(":")[2]
            raise ConfigError(
                None, "[env]", f"wrappers[{i}]", f"{name} cannot wrap {env_id}: {text}"
            ) from None
    return env


def _worker(conn: Any, env_id: str, kwargs: dict[str, Any], seed: int, wrappers: Wrappers) -> None:
    """One copy in a subprocess: a one-copy GymVecEnv, so flattening, action scaling and
    autoreset are the very code the in-process path runs."""
    try:
        _import_builtin_envs()
        env = GymVecEnv(env_id, kwargs, 1, seed, wrappers)
        conn.send(("ok", None))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        conn.send(("error", repr(exc)))
        return
    try:
        while True:
            cmd, data = conn.recv()
            if cmd == "step":
                conn.send(_answer(env.step, data))
            elif cmd == "reset":
                conn.send(_answer(lambda seed: env.reset(seed=seed), data))
            elif cmd == "stage":
                conn.send(_answer(env.set_curriculum_stage, data))
            elif cmd == "close":
                break
    except (EOFError, KeyboardInterrupt):
        pass  # the parent went away or Ctrl-C reached the whole group: just stop
    finally:
        env.close()
        conn.close()


class _Raised:
    """What a copy's env raised in its subprocess, sent to the parent to raise there (else the
    worker died and the parent saw only an EOFError)."""

    def __init__(self, exc: BaseException, text: str) -> None:
        self.exc, self.text = exc, text


def _answer(call: Callable[[Any], Any], data: Any) -> Any:
    try:
        return call(data)
    except Exception as exc:  # noqa: BLE001 - the user's env raised: the parent raises it
        text = traceback.format_exc()
        try:
            pickle.dumps(exc)
        except Exception:  # noqa: BLE001 - an exception that cannot cross the pipe
            exc = RuntimeError(f"{type(exc).__name__}: {exc}")
        return _Raised(exc, text)


def _import_builtin_envs() -> None:
    # A spawned worker starts from a fresh interpreter: our own env ids must be registered there.
    from wheeler2 import registry

    registry.import_builtin_envs()


def make(
    env_id: str,
    kwargs: dict[str, Any],
    num_envs: int,
    seed: int,
    vector: str = "sync",
    wrappers: Wrappers = (),
) -> Any:
    """Registry entry point for gymnasium ids: copies stepped in this process (``"sync"``),
    one subprocess each (``"async"``) or by envpool's thread pool (``"envpool"``, which takes
    no gymnasium wrappers: the registry refuses them first)."""
    if vector == "envpool":
        from wheeler2.envs.envpool_vec import EnvpoolVecEnv

        return EnvpoolVecEnv(env_id, kwargs, num_envs, seed)
    cls = AsyncGymVecEnv if vector == "async" else GymVecEnv
    return cls(env_id, kwargs, num_envs, seed, wrappers)


def _stack(parts: list[np.ndarray | None]) -> np.ndarray | None:
    return None if parts[0] is None else np.concatenate(parts)


class AsyncGymVecEnv:
    """``num_envs`` copies, each in its own subprocess (``[env] vector = "async"``).

    Each step sends every copy its action first and then collects the results, so the copies
    step in parallel; worth it when one env step costs much more than a pipe round trip
    (~50-100 us), e.g. physics sims, not for Pendulum. Same EnvStep contract as GymVecEnv.
    """

    def __init__(
        self,
        env_id: str,
        kwargs: dict[str, Any],
        num_envs: int,
        seed: int,
        wrappers: Wrappers = (),
    ) -> None:
        import multiprocessing as mp

        self.env_id = env_id
        self.num_envs = num_envs
        self._seed = seed
        # One copy here for the static facts (spaces, info) and the goal reward HER calls.
        self._probe = GymVecEnv(env_id, kwargs, 1, seed, wrappers)
        self.info = self._probe.info
        self.observation_space = self._probe.observation_space
        self.action_space = self._probe.action_space
        # forkserver: forking a process that already runs torch threads can deadlock the child.
        ctx = mp.get_context("forkserver")
        self._conns = []
        self._procs = []
        try:
            for i in range(num_envs):
                parent, child = ctx.Pipe()
                proc = ctx.Process(
                    target=_worker,
                    args=(child, env_id, kwargs, seed + i, wrappers),
                    daemon=True,
                )
                proc.start()
                child.close()
                self._conns.append(parent)
                self._procs.append(proc)
            for i, conn in enumerate(self._conns):
                try:
                    status, err = conn.recv()
                except EOFError:
                    status, err = "error", "the worker process died (see its traceback above)"
                if status != "ok":
                    raise RuntimeError(f"{env_id}: env copy {i} failed to start: {err}")
        except BaseException:
            self.close()
            raise

    def reset(self, seed: int | None = None) -> EnvReset:
        base = self._seed if seed is None else seed
        for i, conn in enumerate(self._conns):
            conn.send(("reset", base + i))
        parts = self._replies("reset")
        return EnvReset(
            obs=np.concatenate([p.obs for p in parts]),
            achieved_goal=_stack([p.achieved_goal for p in parts]),
            desired_goal=_stack([p.desired_goal for p in parts]),
        )

    def step(self, action: np.ndarray) -> EnvStep:
        action = np.asarray(action)
        for i, conn in enumerate(self._conns):
            conn.send(("step", action[i : i + 1]))
        parts: list[EnvStep] = self._replies("step")
        return EnvStep(
            obs=np.concatenate([p.obs for p in parts]),
            reward=np.concatenate([p.reward for p in parts]),
            terminated=np.concatenate([p.terminated for p in parts]),
            truncated=np.concatenate([p.truncated for p in parts]),
            final_obs=np.concatenate([p.final_obs for p in parts]),
            infos=[p.infos[0] for p in parts],
            achieved_goal=_stack([p.achieved_goal for p in parts]),
            desired_goal=_stack([p.desired_goal for p in parts]),
            final_achieved_goal=_stack([p.final_achieved_goal for p in parts]),
            final_desired_goal=_stack([p.final_desired_goal for p in parts]),
        )

    def _replies(self, cmd: str) -> list[Any]:
        """Every copy's answer to ``cmd`` (all of them, so the pipes stay in step); what a
        copy's env raised is raised here, with the copy and its subprocess traceback."""
        parts = []
        for i, conn in enumerate(self._conns):
            try:
                parts.append(conn.recv())
            except EOFError:
                parts.append(
                    _Raised(RuntimeError(f"{self.env_id}: env copy {i}'s process died"), "")
                )
        for i, part in enumerate(parts):
            if isinstance(part, _Raised):
                part.exc.add_note(
                    f"(raised by {self.env_id} in {cmd}, env copy {i}'s subprocess)\n{part.text}"
                )
                raise part.exc
        return parts

    def compute_reward(
        self, achieved_goal: np.ndarray, desired_goal: np.ndarray, info: Any = None
    ) -> np.ndarray:
        return self._probe.compute_reward(achieved_goal, desired_goal, info)

    def set_curriculum_stage(self, stage: int) -> None:
        self._probe.set_curriculum_stage(stage)
        for conn in self._conns:
            conn.send(("stage", stage))
        self._replies("stage")

    def close(self) -> None:
        for conn in self._conns:
            try:
                conn.send(("close", None))
            except (BrokenPipeError, OSError):
                pass
        for proc in self._procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
        for conn in self._conns:
            conn.close()
        self._conns, self._procs = [], []
        self._probe.close()
