"""``wheeler2 export``: a run's policy as one TorchScript or ONNX file, for use without wheeler2.

The exported module maps the engine's flat float32 policy input ``[B, input_dim]`` (see
:attr:`wheeler2.api.Policy.input_layout`) to env actions: observation normalization, the actor,
and the action mapping are all inside, so its output equals :func:`wheeler2.load_policy`'s on
the same observations. Box envs get float32 ``[B, act_dim]`` on the Box bounds, Discrete envs
int64 ``[B]``. docs/export.md shows how to feed it.

Before writing, the module is checked against the agent's own ``act(explore=False)`` on real
observations of the env, so an algorithm whose acting is not "normalize, actor, mode" is refused
instead of exported wrong.
"""

from __future__ import annotations

import contextlib
import copy
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from wheeler2.api import Policy, load_policy
from wheeler2.errors import UsageError
from wheeler2.log import temp_file_beside

FORMATS = {"torchscript": ".pt", "onnx": ".onnx"}
CHECK_TOL = 1e-5  # on actions in env units; float32 rounding of small MLPs stays ~1e-7
ONNX_OPSET = 17


class PolicyModule(nn.Module):
    """normalize -> actor -> deterministic action -> env action, as one traceable module."""

    # Buffers (register_buffer), declared for the type checker.
    mean: torch.Tensor
    inv_std: torch.Tensor
    low: torch.Tensor
    high: torch.Tensor

    def __init__(self, policy: Policy) -> None:
        super().__init__()
        from gymnasium import spaces

        agent = policy.agent
        # Copied so that tracing or exporting never touches the live agent.
        self.actor = copy.deepcopy(agent.eval_net()).cpu().eval().requires_grad_(False)
        norm: Any = getattr(agent, "obs_norm", None)
        self.normalize = norm is not None and hasattr(norm, "mean")
        dim = policy.input_dim
        mean = np.zeros(dim) if not self.normalize else norm.mean
        # The very float64 -> float32 steps of agents/normalize.RunningNorm._refresh.
        inv_std = np.ones(dim) if not self.normalize else 1.0 / np.maximum(norm.std, norm.eps)
        self.clip = float(norm.clip) if self.normalize else 0.0
        # A turn-based game's rows end with the legal-action mask (agents/parts/masks.py):
        # normalization leaves those columns raw, and the mode is taken over the legal actions
        # only, as the agents' decide_legal does. Without both, the file could play illegal
        # moves, or be refused or not depending on the observations the check happened to see.
        info = policy.loaded.info
        self.mask_dim = int(info.act_dim) if info.action_mask else 0
        self.keep_last = int(getattr(norm, "keep_last", 0)) if self.normalize else 0
        self.register_buffer("mean", torch.as_tensor(mean, dtype=torch.float32))
        self.register_buffer("inv_std", torch.as_tensor(inv_std, dtype=torch.float32))
        self.discrete = policy.discrete
        space = policy.action_space
        start = int(space.start) if isinstance(space, spaces.Discrete) else 0
        self.start = start
        if isinstance(space, spaces.Box):
            low = torch.as_tensor(space.low.astype(np.float64).reshape(-1))
            high = torch.as_tensor(space.high.astype(np.float64).reshape(-1))
        else:  # no Box to scale onto: keep [-1, 1] (the engine's own units)
            low = -torch.ones(1, dtype=torch.float64)
            high = torch.ones(1, dtype=torch.float64)
        self.register_buffer("low", low)
        self.register_buffer("high", high)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raw = x
        if self.normalize:
            x = ((x - self.mean) * self.inv_std).clamp(-self.clip, self.clip)
            if self.keep_last:
                x = torch.cat([x[..., : -self.keep_last], raw[..., -self.keep_last :]], dim=-1)
        out = self.actor(x)
        if self.discrete:  # Q-values or logits: the mode is the argmax (over the legal ones)
            if self.mask_dim:
                legal = raw[..., -self.mask_dim :] > 0.5
                # A row with no legal action counts all legal (wheeler2.env.legal_actions).
                legal = legal | ~legal.any(-1, keepdim=True)
                out = out.masked_fill(~legal, float("-inf"))
            return out.argmax(-1) + self.start
        # DDPG's actor ends in tanh, a Gaussian actor's mean does not: both clip to [-1, 1], then
        # the gym adapter's mapping, in float64 as the adapter computes it.
        a = out.clamp(-1.0, 1.0).to(torch.float64)
        return (self.low + (a + 1.0) * 0.5 * (self.high - self.low)).to(torch.float32)


def sample_inputs(policy: Policy, copies: int = 8, steps: int = 8) -> np.ndarray:
    """Real flat policy inputs: ``copies`` eval env copies reset and stepped by the policy."""
    from wheeler2.env import policy_obs
    from wheeler2.runtime.parts import make_env
    from wheeler2.runtime.plan import learner_plan, plan_team
    from wheeler2.runtime.seeds import eval_env_seed, eval_reset_seed

    config = policy.loaded.config
    lead = learner_plan(plan_team(config))
    env = make_env(config, copies, eval_env_seed(config), lead)
    rows = []
    try:
        st: Any = env.reset(seed=eval_reset_seed(config))
        for _ in range(steps):
            flat = policy_obs(st.obs, st.desired_goal)
            rows.append(flat)
            st = env.step(policy.engine_action(flat))
    finally:
        env.close()
    return np.concatenate(rows)


def check_module(module: nn.Module, policy: Policy, flat: np.ndarray) -> None:
    """Refuse a module whose actions differ from the agent's on ``flat``."""
    with torch.inference_mode():
        got = module(torch.as_tensor(flat)).numpy()
    want = policy.env_action(policy.engine_action(flat)).reshape(got.shape)
    err = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)), initial=0.0))
    if err > CHECK_TOL:
        raise UsageError(
            f"cannot export {policy.loaded.algo}: its act(explore=False) is not 'normalize, "
            f"actor, mode' (the module differs by {err:.3g} on real observations)"
        )


def export_policy(
    run_dir: str | Path,
    fmt: str = "torchscript",
    out: str | Path | None = None,
    checkpoint: str = "best",
) -> Path:
    """Write the run's policy as ``fmt`` (``torchscript`` or ``onnx``) to ``out`` (default
    ``run_dir/policy.pt`` / ``policy.onnx``); returns the file written."""
    _check_format(fmt)
    return write_policy(load_policy(run_dir, checkpoint), fmt, out)


def write_policy(policy: Policy, fmt: str, out: str | Path | None = None) -> Path:
    """:func:`export_policy` for a policy already loaded."""
    _check_format(fmt)
    run_dir = policy.loaded.run_dir
    out = Path(out) if out is not None else run_dir / f"policy{FORMATS[fmt]}"
    if policy.recurrent:
        # The exported module maps one input batch to actions; a memory that must flow from
        # call to call has no place in it, and the first-step check would not catch that.
        raise UsageError(
            f"cannot export {policy.loaded.algo} with a recurrent core: the exported module "
            "has no policy state; use wheeler2.load_policy, which carries it"
        )
    if out.is_dir():
        raise UsageError(f"-o {out}: is a directory; expected a file name")
    module = PolicyModule(policy).eval()
    flat = sample_inputs(policy)
    check_module(module, policy, flat)
    out.parent.mkdir(parents=True, exist_ok=True)
    # Written beside ``out`` and renamed over it once whole: an exporter error, a full disk or
    # a Ctrl-C leaves the previous file (or none), never half a file that fails on loading.
    fd, tmp = temp_file_beside(out)
    os.close(fd)
    try:
        _write(module, torch.as_tensor(flat[:2]), fmt, Path(tmp))
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return out


def _write(module: nn.Module, example: torch.Tensor, fmt: str, path: Path) -> None:
    with warnings.catch_warnings():
        # torch.jit and the TorchScript-based ONNX exporter announce their deprecation; the
        # files they write are what is asked for here.
        warnings.simplefilter("ignore")
        if fmt == "torchscript":
            with torch.no_grad():
                traced = torch.jit.trace(module, example, check_trace=False)
            traced.save(str(path))
        else:
            torch.onnx.export(
                module,
                (example,),
                str(path),
                dynamo=False,  # the torch.export-based exporter needs onnxscript
                input_names=["obs"],
                output_names=["action"],
                dynamic_axes={"obs": {0: "batch"}, "action": {0: "batch"}},
                opset_version=ONNX_OPSET,
            )


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise UsageError(f"format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if fmt == "onnx":
        _require_onnx()


def _require_onnx() -> None:
    try:
        import onnx  # noqa: F401 - torch's exporter imports it; fail before any work instead
    except ImportError:
        raise UsageError(
            "--format onnx needs the onnx package: pip install 'wheeler2[export]'"
        ) from None
