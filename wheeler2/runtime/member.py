"""One team member: its env copies, its agent, its replay writer, and the loop that runs it.

:class:`Member` is the actor half of Acme's split and :class:`Trainer` (``runtime/trainer.py``)
the learner half;
:class:`MemberLoop` (and :func:`run_member`) is the one loop every backend runs a member with.
The backend only supplies what differs between placements, behind small interfaces: the replay
(shared memory or Ray shards), a :class:`Budget` (step budget, stop, checkpoint requests), a
:class:`Link` to the coordinator, and the weight transport (:class:`WeightSink` on the learner,
a :class:`WeightSource` on syncing explorers).
"""

from __future__ import annotations

import math
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from torch import nn

from wheeler2.agent import Agent, Transitions
from wheeler2.buffer import Replay
from wheeler2.env import EnvStep, VecEnv, policy_obs
from wheeler2.runtime.curriculum import apply_stage
from wheeler2.runtime.evaluation import evaluate
from wheeler2.runtime.heads import make_heads, make_task
from wheeler2.runtime.messages import (
    Building,
    Evaluated,
    Failed,
    Figures,
    Finished,
    Started,
    StateReply,
)
from wheeler2.runtime.opponents import (
    POOL_KEY,
    Drivers,
    EvalDrivers,
    OtherTable,
    build_drivers,
    driven_groups,
    match_figures,
)
from wheeler2.runtime.parts import make_agent, make_env, negamax_of, space_info
from wheeler2.runtime.plan import MemberPlan, plan_team, shares_policy_state, table_learner
from wheeler2.runtime.protocols import (
    Budget,
    Link,
    ReplayTable,
    ReplayWriter,
    WeightSink,
    WeightSource,
)
from wheeler2.runtime.replays import ReplaySpec
from wheeler2.runtime.seeds import eval_env_seed, eval_reset_seed, member_seed, resumed_env_seed
from wheeler2.runtime.trainer import NonFiniteError, Trainer, check_losses
from wheeler2.shared import SharedBlock, share
from wheeler2.sync import publish_view, sink_pulls, sync_target
from wheeler2.task import RewardHeads

if TYPE_CHECKING:
    from wheeler2.config import Config

REPORT_EVERY_S = 2.0  # figures, which are also the member's heartbeat
START_POLL_S = 0.01  # how often a member at the start line looks whether the team is up
# The sampling learner's replay priority terms (the RND of [buffer] priority_novelty) in its
# checkpointed state: they live in the process that samples, not in the shared table.
PRIORITY_KEY = "replay_priority_terms"
# The member's finished episodes, in its checkpointed state beside its env steps (which travel
# in the messages): a resumed run counts on from them rather than from 0.
EPISODES_KEY = "member_episodes"


def failed(member: str, exc: BaseException) -> Failed:
    """What a member that raised tells the coordinator: one line for a non-finite value (its
    own message says everything), the traceback otherwise."""
    import traceback

    if isinstance(exc, NonFiniteError):
        return Failed(member, str(exc), how="produced a non-finite value")
    return Failed(member, "".join(traceback.format_exception(exc)))


PUBLISH_EVERY = 50  # learner updates (on-policy: env steps) between weight publishes


@dataclass
class MemberStats:
    env_steps: int = 0
    episodes: int = 0
    recent_returns: deque = field(default_factory=lambda: deque(maxlen=20))
    started: float = field(default_factory=time.perf_counter)
    resumed_steps: int = 0  # steps restored from a checkpoint: not taken in this session

    def resume_from(self, env_steps: int, episodes: int = 0) -> None:
        self.env_steps = self.resumed_steps = int(env_steps)
        self.episodes = int(episodes)

    def steps_per_s(self) -> float:
        taken = self.env_steps - self.resumed_steps
        return taken / max(time.perf_counter() - self.started, 1e-9)


def _valid_mask(st: EnvStep) -> np.ndarray | None:
    """Which rows' transitions are real (docs/envs.md, "Active mask"); None means all, which is
    every gymnasium env, so the single-agent path pays one dict lookup and nothing else."""
    infos = st.infos
    if not infos or "active" not in infos[0]:
        return None
    valid = np.fromiter((info.get("active", True) for info in infos), bool, len(infos))
    return None if valid.all() else valid


class Member:
    """Steps ``env`` with ``agent`` and pushes every transition into the central replay."""

    def __init__(
        self,
        name: str,
        role: str,
        agent: Agent,
        env: VecEnv,
        heads: RewardHeads,
        writer: ReplayWriter | None,
        seed: int,
        shares_state: bool = True,
    ) -> None:
        """``shares_state``: whether this agent's policy state means to the table's learner
        what its own does (:func:`wheeler2.runtime.plan.shares_policy_state`); where not, the
        replay's state column gets zeros."""
        self.name = name
        self.role = role
        self.agent = agent
        self.env = env
        self.heads = heads
        self.writer = writer
        self.stats = MemberStats()
        first = env.reset(seed=seed)
        self._obs, self._ag, self._dg = first.obs, first.achieved_goal, first.desired_goal
        self._ep_return = np.zeros(env.num_envs, np.float64)
        # Per-head episode returns, only with several heads (one head is episode_return).
        self._head_return = np.zeros((env.num_envs, len(heads)), np.float64)
        self._recent_heads: deque = deque(maxlen=20)
        self.last_metrics: dict[str, float] = {}
        self._store_logp = writer is not None and bool(writer.layout.logp)
        self._no_logp = np.full(env.num_envs, np.nan, np.float32)
        # Policy state, one row per env copy (recurrent agents only; docs/architecture.md,
        # "Policy state"). Feedforward agents keep the plain act(obs, explore) call.
        self._state: np.ndarray | None = None
        if getattr(agent, "state_dim", 0) > 0:
            self._initial = agent.initial_state(env.num_envs)
            self._state = self._initial.copy()
        # The buffer's state column (its width is the learner's): a member whose state is
        # another width, who has none, or whose state means something else (another
        # algorithm's cores of the same total width), stores zeros there.
        width = int(getattr(writer.layout, "state_dim", 0) or 0) if writer is not None else 0
        self._store_state = width > 0
        self._same_width = shares_state and width == getattr(agent, "state_dim", 0)
        self._no_state = np.zeros((env.num_envs, width), np.float32)

    def step(self) -> int:
        """One vector step of every copy. Returns the number of env steps taken."""
        obs, ag, dg = self._obs, self._ag, self._dg
        pin = policy_obs(obs, dg)
        state = self._state
        if state is None:
            out = self.agent.act(pin, explore=True)
        else:
            out = self.agent.act(pin, explore=True, state=state)
        st: EnvStep = self.env.step(out.action)
        valid = _valid_mask(st)
        reward = self.heads.compute(
            obs,
            out.action,
            st.final_obs,
            st.final_achieved_goal,
            st.final_desired_goal,
            st.infos,
            st.reward,
        )
        # What is learned from: the step as it happened, or (negamax self-play) the move to
        # the opponent's reply; returns and episode ends count what happened either way.
        learned, next_obs, terminated, truncated = reward, st.final_obs, st.terminated, st.truncated
        if st.ply is not None:
            ply = st.ply
            next_obs, terminated, truncated = ply.next_obs, ply.terminated, ply.truncated
            learned = self.heads.compute(
                obs, out.action, next_obs, None, None, st.infos, ply.reward
            )
        if not np.isfinite(reward).all():
            bad = int(np.flatnonzero(~np.isfinite(reward).all(axis=0))[0])
            value = reward[:, bad][~np.isfinite(reward[:, bad])][0]
            raise NonFiniteError(f"reward head {self.heads.names[bad]!r} is {value}")
        metrics = self.agent.observe(
            Transitions(
                obs=pin,
                action=out.action,
                reward=learned,
                next_obs=policy_obs(next_obs, st.final_desired_goal),
                terminated=terminated,
                truncated=truncated,
                reset_obs=policy_obs(st.obs, st.desired_goal),
                act_out=out,
                active=valid,
                state=state,
            )
        )
        if metrics:
            check_losses(metrics)
            self.last_metrics.update(metrics)
        if self.writer is not None:
            logp = out.logp
            if logp is None and self._store_logp:
                # A deterministic policy has no behaviour probability: NaN says "unknown".
                logp = self._no_logp
            extra = self._state_column(state)
            worth = self.heads.worth(
                obs,
                out.action,
                next_obs,
                st.final_achieved_goal,
                st.final_desired_goal,
                st.infos,
                learned,
            )
            if worth is not None:
                extra["worth"] = worth  # the replay's admission (buffer/admission.py)
            self.writer.add(
                obs,
                out.action,
                learned,
                next_obs,
                terminated,
                truncated,
                logp=logp,
                achieved_goal=ag,
                desired_goal=dg,
                next_achieved_goal=st.final_achieved_goal,
                valid=valid,
                **extra,
            )
        if state is not None:
            self._state = self._next_state(out.state, st, valid, state)
        self._track_returns(st, reward)
        self._obs, self._ag, self._dg = st.obs, st.achieved_goal, st.desired_goal
        # Env steps count real agent-steps: an absent multi-agent row took none.
        n = self.env.num_envs if valid is None else int(valid.sum())
        self.stats.env_steps += n
        return n

    def _state_column(self, state: np.ndarray | None) -> dict[str, np.ndarray]:
        """``state=`` for the writer, only when the buffer has the column."""
        if not self._store_state:
            return {}
        return {"state": state if self._same_width and state is not None else self._no_state}

    def _next_state(
        self, out: np.ndarray | None, st: EnvStep, valid: np.ndarray | None, before: np.ndarray
    ) -> np.ndarray:
        """The state each copy acts in next: the agent's, back to the initial one where the
        episode ended; a multi-agent row that was absent keeps the state it had."""
        if out is None or out.shape != before.shape:
            raise RuntimeError(
                f"{type(self.agent).__name__}.act must return ActOut.state of shape "
                f"{before.shape} (its state_dim is {self.agent.state_dim})"
            )
        # A copy: ActOut.state may be the agent's own buffer, and the rows are edited below.
        nxt = np.array(out, np.float32)
        done = st.terminated | st.truncated
        if valid is not None:
            nxt[~valid] = before[~valid]
        if done.any():
            nxt[done] = self._initial[done]
        return nxt

    def _track_returns(self, st: EnvStep, reward: np.ndarray) -> None:
        self._ep_return += st.reward
        if len(self.heads) > 1:
            self._head_return += reward
        done = st.terminated | st.truncated
        if done.any():
            if len(self.heads) > 1:
                self._recent_heads.extend(self._head_return[done])
                self._head_return[done] = 0.0
            for i in np.flatnonzero(done):
                self.stats.recent_returns.append(float(self._ep_return[i]))
                self.stats.episodes += 1
            self._ep_return[done] = 0.0

    def figures(self) -> dict[str, float]:
        out = {
            "env_steps": float(self.stats.env_steps),
            "episodes": float(self.stats.episodes),
            "steps_per_s": self.stats.steps_per_s(),
        }
        if self.stats.recent_returns:
            out["episode_return"] = float(np.mean(self.stats.recent_returns))
        if self._recent_heads:
            for name, value in zip(self.heads.names, np.mean(self._recent_heads, axis=0)):
                out[f"episode_return/{name}"] = float(value)
        out.update(self.last_metrics)
        admission = getattr(self.writer, "admission", None)
        if admission is not None:
            out.update(admission.figures())  # rows stored and refused by this member
        return out

    def close(self) -> None:
        if self.writer is not None:
            self.writer.flush()
        self.env.close()


class TeeWriter:
    """Writes every transition into two tables: the shared one and the learner's own."""

    def __init__(self, shared: ReplayWriter, own: ReplayWriter) -> None:
        self.shared, self.own = shared, own
        self.layout = shared.layout
        self.admission = getattr(shared, "admission", None)  # the shared table's counts

    def add(self, *args: Any, **kwargs: Any) -> None:
        self.shared.add(*args, **kwargs)
        self.own.add(*args, **kwargs)

    def flush(self) -> None:
        self.shared.flush()
        self.own.flush()


# --------------------------------------------------------------------------------------------
# what a backend supplies (its parts are the Protocols of runtime/protocols.py)


@dataclass
class Wiring:
    """Everything a backend hands one member: where it runs is the backend's only decision."""

    budget: Budget
    link: Link
    replay: ReplayTable | None  # a Replay, or ray's ShardedReplay: writer(), and the sampling side
    # Whether the member has a process of its own: its producer side may then wait on the ratio
    # gate; in one shared process (serial) a wait would deadlock the learner that must sample.
    own_process: bool
    sole: bool = False  # the only member in a shared process (serial solo): its CPU is its own
    sink: WeightSink | None = None  # the learner's
    own: ReplaySpec | None = None  # the learner's own table ([buffer] own_share), or None
    source: Callable[[nn.Module], WeightSource] | None = None  # an explorer's, given its actor
    state: dict[str, Any] | None = None  # resumed agent state
    env_steps: int = 0  # resumed step count
    next_eval: int = 0
    where: dict[str, Any] = field(default_factory=dict)
    # Joint play: every other table's weights and replay (runtime/opponents.py).
    others: dict[str, OtherTable] = field(default_factory=dict)
    # The table's shared parameters (wheeler2/shared.py, A3C), where this member shares them.
    shared: SharedBlock | None = None


# --------------------------------------------------------------------------------------------
# the loop


class MemberLoop:
    """Builds one member and runs it one vector step per :meth:`tick`."""

    member: Member  # set once the build got that far (close() also runs on a failed build)

    def __init__(self, config: Config, plan: MemberPlan, wiring: Wiring) -> None:
        self.config = config
        self.plan = plan
        self.budget = wiring.budget
        self.link = wiring.link
        self.learner = plan.role == "learner"
        # Learners are evaluated; an explorer or actor when its [[team]] entry says evaluate.
        self.evaluates = self.learner or bool(plan.spec.evaluate)
        self.eval_every = int(config.experiment.eval_every)
        self.next_eval = wiring.next_eval
        self.last_eval: int | None = None
        self.stopped = False
        self._closing: list[Any] = []
        try:
            self._build(config, plan, wiring)
        except BaseException:
            self.close()  # the envs already built (a Unity build, env subprocesses) go too
            raise

    def _build(self, config: Config, plan: MemberPlan, wiring: Wiring) -> None:
        exp = config.experiment
        seed = member_seed(config, plan)
        # Each stage is news to the coordinator: its start grace counts from the last one, so a
        # build slowed down stage by stage (a loaded machine) is told from one stuck in a stage.
        self._building("building its envs")
        groups = driven_groups(config, plan)
        env = make_env(config, int(config.env.num_envs), seed, plan, groups)
        self._closing.append(env)
        # [curriculum]: the run's stage (a resumed run's) before the first reset, not stage 0.
        self.stage = -1 if config.curriculum is None else apply_stage(self.budget.stage(), env)
        heads = make_heads(config, env, make_task(config))
        self._building("building its agent")
        space = space_info(env.info, heads, negamax_of(config))
        agent = make_agent(config, plan, space, seed)
        state = dict(wiring.state) if wiring.state is not None else None
        pool_state = None if state is None else state.pop(POOL_KEY, None)
        terms_state = None if state is None else state.pop(PRIORITY_KEY, None)
        episodes = 0 if state is None else int(state.pop(EPISODES_KEY, 0))
        if state is not None:
            agent.load_state_dict(state)
        if wiring.shared is not None:  # after the restore: the table's shared values win
            share(agent, wiring.shared)
        self.drivers: Drivers | None = None
        if hasattr(env, "attach_others"):
            self.drivers = build_drivers(
                config, plan, env, agent, space, wiring.others, seed, pool_state, wiring.replay
            )
            if self.drivers is not None:
                self._closing.append(self.drivers)
                env.attach_others(self.drivers)
        self.next_pull = wiring.env_steps + int(config.play.pull_every)
        replay = wiring.replay
        writer: ReplayWriter | None = None
        if replay is not None:
            self._building("attaching the replay")
            block = (not self.learner) if wiring.own_process else None
            writer = replay.writer(num_envs=env.num_envs, block=block)
        own = None
        if self.learner and wiring.own is not None and writer is not None:
            own = wiring.own.create()  # this process's own: unlinked when the member closes
            self._closing.append(own)
            writer = TeeWriter(writer, own.writer(num_envs=env.num_envs))
        self.agent = agent
        # CPU seconds of this member's process, reported where the process is its alone: what
        # share of the cores each member took (experiments/team_vs_solo.py).
        alone = wiring.own_process or wiring.sole
        self.cpu_from = time.process_time() if alone else None
        env_seed = seed if wiring.env_steps == 0 else resumed_env_seed(seed, wiring.env_steps)
        shares = shares_policy_state(plan, table_learner(plan_team(config), plan))
        self.member = Member(plan.name, plan.role, agent, env, heads, writer, env_seed, shares)
        self.member.stats.resume_from(wiring.env_steps, episodes)
        self.trainer = None
        if self.learner and replay is not None:
            # Ray's sharded replay already keeps sample calls in flight: nothing to hide there.
            prefetch = config.buffer.prefetch and isinstance(replay, Replay)
            self.trainer = Trainer(agent, replay, own, prefetch=prefetch)
            self._closing.append(self.trainer)
            if isinstance(replay, Replay):  # on Ray the shard samples, and keeps this itself
                replay.load_priority_state(terms_state)
                # PER's beta goes on from the resumed learner's updates, replay saved or not.
                for table in (replay, own):
                    if table is not None:
                        table.continue_updates(self.trainer.updates)
        self.sink = wiring.sink if self.learner else None
        # The actor, or with it the modules the table's explorers pull by name (sync.ModuleSet).
        self.published = None if self.sink is None else publish_view(agent, sink_pulls(self.sink))
        self.eval_env = None
        self.eval_drivers: EvalDrivers | None = None
        if self.evaluates:
            self._building("building its eval envs")
            self.eval_env = make_env(
                config, int(exp.eval_episodes), eval_env_seed(config), plan, groups
            )
            self._closing.append(self.eval_env)
            if hasattr(self.eval_env, "attach_others"):
                # Other tables play as in training; the table's own other seats at random.
                act_dim = env.info.act_dim
                self.eval_drivers = EvalDrivers(self.drivers, None, act_dim, eval_env_seed(config))
                self.eval_env.attach_others(self.eval_drivers)
        if config.curriculum is not None:
            apply_stage(self.stage, self.eval_env)
        self.source = None
        sync = plan.spec.sync
        if not self.learner and sync is not None and wiring.source is not None:
            self.source = wiring.source(sync_target(agent))
            self._closing.append(self.source)
            self._building("taking the learner's weights")
            self.source.pull()
        self.sync_every = int(sync.every) if sync is not None else 0
        self.next_sync = wiring.env_steps + self.sync_every
        self.next_publish = PUBLISH_EVERY
        self.seen_request = self.budget.request()
        self.share_credit = 0.0  # step_share: updates this learner may still pay (_share_cap)
        self.next_report = time.perf_counter() + REPORT_EVERY_S
        if isinstance(replay, Replay) and not self.learner:
            # Held by the gate (a learner's step_share holds producers for many seconds), the
            # member still reports: the coordinator would take its silence for a hang.
            replay.on_wait = self._report_when_due
        self.running = False  # past the team's start line (Budget.opened)
        self.link.send(
            Started(
                member=plan.name,
                pid=os.getpid(),
                agents=env.info.agents,
                synced=() if self.source is None else tuple(self.source.synced),
                where=dict(wiring.where),
            )
        )

    def _building(self, stage: str) -> None:
        self.link.send(Building(self.plan.name, stage))

    def tick(self) -> bool:
        """One vector step of every env copy and whatever is due after it (updates, publish,
        eval, sync, state, report). False once the member is done: budget spent or stop."""
        budget = self.budget
        if budget.stopped():
            self.stopped = True
            return False
        if not self.running:
            if not budget.opened():
                time.sleep(START_POLL_S)
                self._report_when_due()  # a heartbeat while the slowest member starts
                return True
            self.running = True
            self.link.opened()
            self.member.stats.started = time.perf_counter()  # rates count from the start line
        if self.config.curriculum is not None and budget.stage() != self.stage:
            self.stage = apply_stage(budget.stage(), self.member.env, self.eval_env)
        want = self.member.env.num_envs
        if not budget.claim(want):
            self.stopped = budget.stopped()
            return False
        try:
            used = self.member.step()
            budget.settle(want, used)
            if self.learner:
                self._learn()
            elif self.evaluates:
                self._evaluate_when_due()
            drivers = self.drivers
            if drivers is not None:
                drivers.after_update(int(getattr(self.agent, "updates", 0)))
                if self.member.stats.env_steps >= self.next_pull:
                    drivers.pull()
                    self.next_pull += int(self.config.play.pull_every)
        except NonFiniteError as exc:
            exc.member = self.plan.name
            exc.env_steps = budget.run_steps(self.member.stats.env_steps)
            raise
        if self.source is not None and self.member.stats.env_steps >= self.next_sync:
            self.source.pull()
            self.next_sync += self.sync_every
        request = budget.request()
        if request != self.seen_request:
            self.seen_request = request
            self.link.send(
                StateReply(self.plan.name, request, self.state_dict(), self.member.stats.env_steps)
            )
        self._report_when_due()
        return True

    def _report_when_due(self) -> None:
        now = time.perf_counter()
        if now >= self.next_report:
            self.next_report = now + REPORT_EVERY_S
            self.link.send(Figures(self.plan.name, self.figures()))
            if self.trainer is not None:
                # The heartbeat reaches the replay too: producers the gate holds while this
                # learner evaluates (or waits) must not take it for dead.
                self.trainer.replay.alive()

    def _learn(self) -> None:
        trainer = self.trainer
        if trainer is None:
            # On-policy learners update inside step: they publish every PUBLISH_EVERY env steps.
            self._publish_when_due(self.member.stats.env_steps)
        else:
            # Every update the gate owes as this step ends, PUBLISH_EVERY at a time with a
            # publish (and a heartbeat) between. One batch of PUBLISH_EVERY per step would fall
            # behind for good wherever updates_per_insert x the rows inserted per step (the
            # learner's own num_envs; on serial, every member's) exceeds it. Bounded: producers
            # in other processes run at most the gate's tolerance ahead.
            owed = trainer.owed()
            left = PUBLISH_EVERY if owed is None else owed
            cap = self._share_cap()
            if cap is not None:
                left = min(left, cap)
            paid = 0
            while left > 0:
                want = min(left, PUBLISH_EVERY)
                done = trainer.train_available(max_updates=want)
                paid += done
                self._publish_when_due(trainer.updates)
                left -= done
                if done < want:
                    break
                if left > 0:
                    self._report_when_due()
            if cap is not None:
                self.share_credit -= paid
        self._evaluate_when_due()

    def _share_cap(self) -> int | None:
        """The most updates this step may pay while the learner is below its ``step_share``;
        None at or above it.

        Paying u updates per step of ``n`` rows lets the gate admit ``u / ratio`` rows in all,
        the learner's included, so the learner's rows are ``n ratio / u`` of them. Below its
        share it pays ``n ratio (1 - s) / s`` per step, which gives it ``s / (1 - s)`` of the
        rows, more than ``s``; but never less than ``n ratio``, its own rows' worth, so no
        debt of updates builds up while it catches up (at s >= 0.5 the others are held
        outright). The credit carries fractions over: at ``n ratio`` under 1, an update every
        few steps."""
        share = self.plan.spec.step_share
        if not share:
            return None
        own = self.member.stats.env_steps
        if own >= share * self.budget.run_steps(own):
            self.share_credit = 0.0
            return None
        rows = self.member.env.num_envs * self.config.buffer.updates_per_insert
        per_step = rows * max((1.0 - share) / share, 1.0)
        # Updates the gate did not owe yet stay credited, at most a step's worth (or one).
        self.share_credit = min(self.share_credit, max(per_step, 1.0)) + per_step
        return math.floor(self.share_credit)

    def _publish_when_due(self, progress: int) -> None:
        if self.sink is not None and self.published is not None and progress >= self.next_publish:
            self.sink.publish(self.published)
            self.next_publish = progress + PUBLISH_EVERY

    def _evaluate_when_due(self) -> None:
        total = self.budget.run_steps(self.member.stats.env_steps)
        if total >= self.next_eval:
            self._evaluate(total)
            self.next_eval = (total // self.eval_every + 1) * self.eval_every

    def _evaluate(self, env_steps: int) -> None:
        self.last_eval = env_steps
        seed = eval_reset_seed(self.config)
        assert self.eval_env is not None  # every evaluating member builds its eval envs
        heads = self.member.heads
        result = evaluate(self.agent, self.eval_env, seed, heads, heartbeat=self._report_when_due)
        if self.config.play.eval_vs and self.learner and hasattr(self.eval_env, "seats"):
            env: Any = self.eval_env
            vs = self.config.play.eval_vs
            result.matches = match_figures(self.agent, env, self.drivers, vs, result, seed)
            env.attach_others(self.eval_drivers)  # back to its own for the next eval
        state, own = self.state_dict(), self.member.stats.env_steps
        self.link.send(Evaluated(self.plan.name, env_steps, result, state, own, self.stage))

    def finish(self) -> None:
        """After the last tick. A learner whose budget is spent takes the updates the gate still
        owes, then the closing eval, so the curve ends on the final actor; a stopped one does
        neither (an evaluated explorer only the closing eval). Every member then sends its
        figures and its final state."""
        # Its staged rows into the replay first: the owed updates count them (a learner's last
        # chunk of rows was never trained on), and on Finished the coordinator may snapshot the
        # replay for the final checkpoint at once (buffer.checkpoint), before close() runs.
        self._flush()
        if self.evaluates and not self.stopped:
            updates = 0
            if self.trainer is not None:
                updates = self.trainer.train_owed(heartbeat=self._report_when_due)
            total = self.budget.run_steps(self.member.stats.env_steps)
            if updates or total != self.last_eval:
                self._evaluate(total)
        self.link.send(Figures(self.plan.name, self.figures()))
        self.link.send(Finished(self.plan.name, self.state_dict(), self.member.stats.env_steps))

    def state_dict(self) -> dict[str, Any]:
        """The agent's state, with the member's episode count, the self-play pool where the
        member keeps one and the replay's priority terms where this member samples them."""
        state = self.agent.state_dict()
        state[EPISODES_KEY] = self.member.stats.episodes
        pool = None if self.drivers is None else self.drivers.pool
        if pool is not None:
            state[POOL_KEY] = pool.state_dict()
        replay = None if self.trainer is None else self.trainer.replay
        terms = replay.priority_state() if isinstance(replay, Replay) else None
        if terms is not None:
            state[PRIORITY_KEY] = terms
        return state

    def figures(self) -> dict[str, float]:
        values = self.member.figures()
        values["wall_s"] = time.perf_counter() - self.member.stats.started
        if self.cpu_from is not None:
            values["cpu_s"] = time.process_time() - self.cpu_from
            values["nice"] = float(os.nice(0))
        if self.trainer is not None:
            values.update(self.trainer.pop_metrics())
            stats = self.trainer.replay.stats()
            values["updates_per_insert"] = float(stats.get("updates_per_insert", 0.0))
            capacity = int(self.config.buffer.capacity)
            values["replay_rows"] = float(min(int(stats.get("inserts", 0)), capacity))
            values["replay_fill"] = values["replay_rows"] / capacity
        if self.source is not None and self.source.version:
            values["sync_version"] = float(self.source.version)
            values["sync_version_lag"] = float(self.source.lag())
        if self.drivers is not None:
            values.update(self.drivers.figures())
        return values

    def close(self) -> None:
        """Flush the writer and close the envs and the weight source; the replay and the sink
        belong to the backend."""
        try:
            self._flush()
        finally:
            self._close_resources()

    def _flush(self) -> None:
        """Insert what the member's writers have staged."""
        member: Member | None = getattr(self, "member", None)  # None: the build failed
        if member is not None and member.writer is not None:
            member.writer.flush()
        drivers = getattr(self, "drivers", None)
        if drivers is not None:
            drivers.flush()

    def _close_resources(self) -> None:
        for res in reversed(self._closing):
            res.close()
        self._closing.clear()


def run_member(config: Config, plan: MemberPlan, wiring: Wiring) -> None:
    """Run one member to the end of its budget (or a stop) in this process."""
    loop = MemberLoop(config, plan, wiring)
    try:
        while loop.tick():
            pass
        loop.finish()
    finally:
        loop.close()
