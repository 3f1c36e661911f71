"""Backend ``serial``: every member in this process, stepped in turn. For debugging and tests,
and the fastest choice for a lone learner: no process boundary, no lock contention."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from wheeler2 import checkpoint as ckpt
from wheeler2.runtime import build
from wheeler2.runtime.evaluation import evaluate
from wheeler2.runtime.experiment import Recorder, RunState, load_resume_state, shield_shutdown
from wheeler2.runtime.member import Member, Trainer


def run_serial(config: Any, run_dir: Path, resume: bool) -> dict[str, Any]:
    from wheeler2.buffer import Replay
    from wheeler2.sync import WeightClient, WeightPublisher

    build.set_compute_threads()
    state, payload = load_resume_state(run_dir) if resume else (RunState(), {})
    plans = build.plan_team(config)
    lead = build.learner_plan(plans)
    exp = config.experiment
    num_envs = int(config.env.num_envs)

    probe = build.make_env(config, 1, 0, lead)
    task = build.make_task(config)
    heads = build.make_heads(config, probe, task)
    space = build.space_info(probe.info, heads)
    info = probe.info
    probe.close()

    agents = {
        p.name: build.make_agent(config, p, space, build.member_seed(config, p)) for p in plans
    }
    learner = agents[lead.name]
    her = config.buffer.her is not None
    # An on-policy learner learns from its own rollouts: no central replay to fill.
    replay = None
    if learner.uses_replay:
        # One process: insert every step (chunk 1) so a transition is sampleable at once, as in
        # a classic loop; HER needs whole episodes, which the writer then collects by itself.
        replay = Replay.create(
            build.replay_layout(info, heads, logp=any(not a.uses_replay for a in agents.values())),
            build.replay_config(config, lead.spec.params, chunk=None if her else 1),
            gamma=float(learner.params.gamma),
            relabel=heads.relabel if her else None,
            seed=int(exp.seed),
        )
    old_handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGTERM, _raise_interrupt)
    publisher = clients = None
    members: list[Member] = []
    eval_env = None
    recorder = None
    interrupted = False
    try:
        for p in plans:
            env = build.make_env(config, num_envs, build.member_seed(config, p), p)
            members.append(
                Member(
                    p.name,
                    p.role,
                    agents[p.name],
                    env,
                    heads,
                    None if replay is None else replay.writer(num_envs=env.num_envs),
                    build.member_seed(config, p),
                )
            )
        if payload:
            for name, agent in agents.items():
                agent.load_state_dict(payload["members"][name])
            if "replay" in payload and replay is not None:
                replay.load_state_dict(payload["replay"])
            ckpt.set_rng_state(payload["rng"])
        syncing = [
            (m, p.spec.sync) for m, p in zip(members, plans) if p.role == "explorer" and p.spec.sync
        ]
        if syncing:
            publisher = WeightPublisher.create(learner.actor)
            publisher.publish(learner.actor)
            clients = {
                m.name: WeightClient.attach(
                    publisher.handle(), m.agent.actor, list(s.keep), float(s.alpha)
                )
                for m, s in syncing
            }
        trainer = Trainer(learner, replay) if replay is not None else None
        eval_env = build.make_env(config, int(exp.eval_episodes), int(exp.seed) + 99_991, lead)
        recorder = Recorder(config, run_dir, state)
        next_sync = {m.name: s.every for m, s in syncing}

        def checkpoint_payload() -> dict[str, Any]:
            out: dict[str, Any] = {"members": {n: a.state_dict() for n, a in agents.items()}}
            if config.buffer.checkpoint and replay is not None:
                out["replay"] = replay.state_dict()
            return out

        try:
            while state.env_steps < exp.total_steps and not recorder.solved:
                for m in members:
                    state.env_steps += m.step()
                if trainer is not None:
                    trainer.train_available()
                for m, s in syncing:
                    if m.stats.env_steps >= next_sync[m.name]:
                        publisher.publish(learner.actor)
                        clients[m.name].pull()
                        next_sync[m.name] += s.every
                if recorder.eval_due(state.env_steps):
                    best = recorder.record_eval(
                        state.env_steps, evaluate(learner, eval_env, int(exp.seed) + 7)
                    )
                    if best or recorder.checkpoint_due(state.env_steps):
                        recorder.save_checkpoint(checkpoint_payload(), best=best)
                elif recorder.checkpoint_due(state.env_steps):
                    recorder.save_checkpoint(checkpoint_payload())
                if recorder.log_due():
                    _log_figures(recorder, state.env_steps, members, trainer)
        except KeyboardInterrupt:
            interrupted = True
            shield_shutdown()
        final = _log_figures(recorder, state.env_steps, members, trainer)
        recorder.save_checkpoint(checkpoint_payload())
        summary = recorder.finish(final, interrupted=interrupted)
        if interrupted:
            raise KeyboardInterrupt
        return summary
    finally:
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)
        for m in members:
            m.close()
        if eval_env is not None:
            eval_env.close()
        if clients:
            for c in clients.values():
                c.close()
        if publisher is not None:
            publisher.close()
        if replay is not None:
            replay.close()


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _log_figures(
    recorder: Recorder, env_steps: int, members: list[Member], trainer: Trainer | None
) -> dict[str, dict[str, float]]:
    figures = {}
    for m in members:
        values = m.figures()
        if m.role == "learner" and trainer is not None:
            values.update(trainer.pop_metrics())
            stats = trainer.replay.stats()
            values["updates_per_insert"] = float(stats.get("updates_per_insert", 0.0))
        recorder.scalars(m.name, env_steps, values)
        figures[m.name] = values
    recorder.progress(env_steps, figures)
    return figures
