"""A Unity ML-Agents environment without Unity, for ``unity:mock`` (demonstrations and tests).

mlagents-envs ships ``MockCommunicator``, which answers every exchange with the same three agents,
the same observation ``[1, 2, 3]`` and agent 2 done on every step. That is enough to open a
``UnityEnvironment`` but not to exercise episodes, so :class:`ScriptedCommunicator` extends it
with the protocol a real Unity build follows:

* each agent runs episodes of a fixed length (``episode_length + agent index`` steps);
* an episode ends with a terminal AgentInfo (``done``), every ``interrupt_every``-th one as an
  interruption (``max_step_reached``, a timeout rather than a true terminal state);
* an agent that ended its episode requests its next decision in the same step (its reset
  observation arrives in the same message, as Unity does for agents that reset at once), except
  the ``lagging_agents``, whose reset observation only arrives one step later;
* the observation ``[agent id, step in episode, last action code, episode count]`` echoes the
  action it was given, so a test can check that every row's action reached the right agent.
* ``camera = (H, W, C)`` replaces that vector with one visual observation, as a Unity camera
  sensor sends it (float pixels in [0, 1], height x width x channels): channel 0 is dark but
  for one lit pixel at row ``step % H``, column ``agent index % W``; each further channel ``c``
  is uniformly ``(episode count % 5) / 4`` scaled by ``c / (C - 1)``.

* ``action_masks = True`` (discrete only) masks one action of each branch at each decision, as
  an Agent's ``WriteDiscreteActionMask`` does: in branch ``b`` the action ``(t + id + b) %
  size_b`` (``t``: the agent's step in its episode). ``illegal`` counts the masked actions the
  agents were given.

* as a Unity player's ``RpcCommunicator`` does, the initialization message carries the academy
  alone: a behavior's ``BrainParameters`` (its spec) come with the first message that carries
  agents of it, so ``behavior_specs`` stays empty until the first ``reset`` (ML-Agents issue
  5183).

``MockUnityEnvironment`` is a ``UnityEnvironment`` whose ``_get_communicator`` returns one of
these (or the stock ``MockCommunicator`` when ``stock=True``, which sends its spec at once).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mlagents_envs.communicator_objects.agent_info_pb2 import AgentInfoProto
from mlagents_envs.communicator_objects.brain_parameters_pb2 import (
    ActionSpecProto,
    BrainParametersProto,
)
from mlagents_envs.communicator_objects.command_pb2 import RESET
from mlagents_envs.communicator_objects.observation_pb2 import NONE, ObservationProto
from mlagents_envs.communicator_objects.unity_input_pb2 import UnityInputProto
from mlagents_envs.communicator_objects.unity_output_pb2 import UnityOutputProto
from mlagents_envs.communicator_objects.unity_rl_initialization_output_pb2 import (
    UnityRLInitializationOutputProto,
)
from mlagents_envs.communicator_objects.unity_rl_output_pb2 import UnityRLOutputProto
from mlagents_envs.environment import UnityEnvironment
from mlagents_envs.mock_communicator import MockCommunicator

OBS_SIZE = 4
DISCRETE_BRANCHES = (3, 2)  # the stock mock's discrete spec, kept so both mocks agree
CONTINUOUS_SIZE = 2


class _Agent:
    def __init__(self, agent_id: int, length: int) -> None:
        self.id, self.length = agent_id, length
        self.t = self.episode = 0
        self.code = 0.0
        self.waiting_reset = False  # lagging agent: ended, its reset obs not sent yet

    def obs(self) -> list[float]:
        return [float(self.id), float(self.t), self.code, float(self.episode)]

    def restart(self) -> None:
        self.t, self.code, self.waiting_reset = 0, 0.0, False
        self.episode += 1


class ScriptedCommunicator(MockCommunicator):
    """Deterministic episodic agents for any number of behaviors (see the module docstring)."""

    def __init__(
        self,
        discrete_action: bool = False,
        num_agents: int = 3,
        behaviors: Sequence[str] = ("MockBehavior",),
        episode_length: int = 8,
        interrupt_every: int = 3,
        lagging_agents: Sequence[int] = (),
        camera: Sequence[int] | None = None,
        action_masks: bool = False,
    ) -> None:
        super().__init__(discrete_action=discrete_action, num_agents=num_agents)
        if action_masks and not discrete_action:
            raise ValueError("action_masks needs discrete_action = true")
        self.action_masks = action_masks
        self.illegal = 0
        if camera is not None and (len(camera) != 3 or min(camera) < 1):
            raise ValueError(f"camera must be (height, width, channels), got {camera}")
        self.camera = None if camera is None else tuple(int(d) for d in camera)
        self.behaviors = list(behaviors)
        self.interrupt_every = interrupt_every
        self.lagging = set(lagging_agents)
        self.exchanges = 0
        # Ids are unique across behaviors, as Unity's are.
        self.agents = {
            b: [_Agent(100 * j + i, episode_length + i) for i in range(num_agents)]
            for j, b in enumerate(self.behaviors)
        }
        self._decision_order: dict[str, list[_Agent]] = {b: [] for b in self.behaviors}
        self._unsent = list(self.behaviors)  # behaviors whose BrainParameters Python lacks

    def _pixels(self, agent: _Agent) -> list[float]:
        """The camera image of ``agent`` (module docstring), flattened height-major."""
        assert self.camera is not None
        h, w, c = self.camera
        img = [[[0.0] * c for _ in range(w)] for _ in range(h)]
        img[agent.t % h][(agent.id % 100) % w][0] = 1.0
        for k in range(1, c):
            level = (agent.episode % 5) / 4.0 * k / (c - 1)
            for row in img:
                for px in row:
                    px[k] = level
        return [v for row in img for px in row for v in px]

    @staticmethod
    def masked(t: int, agent_id: int) -> tuple[int, ...]:
        """The action masked in each branch at step ``t`` of agent ``agent_id``."""
        return tuple((t + agent_id + b) % size for b, size in enumerate(DISCRETE_BRANCHES))

    def _mask(self, agent: _Agent) -> list[bool]:
        """Unity's action mask: every branch's actions in a row, True where masked."""
        out: list[bool] = []
        for size, m in zip(DISCRETE_BRANCHES, self.masked(agent.t, agent.id)):
            out += [k == m for k in range(size)]
        return out

    def _info(self, agent: _Agent, reward: float, done: bool = False, interrupted: bool = False):
        data, shape = (agent.obs(), [OBS_SIZE])
        if self.camera is not None:
            data, shape = self._pixels(agent), list(self.camera)
        obs = ObservationProto(
            float_data=ObservationProto.FloatData(data=data),
            shape=shape,
            compression_type=NONE,
        )
        mask = self._mask(agent) if self.action_masks and not done else []
        return AgentInfoProto(
            reward=reward,
            done=done,
            max_step_reached=interrupted,
            id=agent.id,
            observations=[obs],
            action_mask=mask,
        )

    def _reset_all(self) -> dict[str, Any]:
        infos = {}
        for b, agents in self.agents.items():
            for agent in agents:
                agent.t, agent.code, agent.waiting_reset = 0, 0.0, False
            self._decision_order[b] = list(agents)
            infos[b] = UnityRLOutputProto.ListAgentInfoProto(
                value=[self._info(a, 0.0) for a in agents]
            )
        return infos

    def _action_code(self, action: Any) -> float:
        if self.is_discrete:
            b0, b1 = action.discrete_actions
            return float(b0 * DISCRETE_BRANCHES[1] + b1)
        return float(sum(action.continuous_actions))

    def _step_behavior(self, b: str, actions: Sequence[Any]) -> list[Any]:
        deciding = self._decision_order[b]
        if actions and len(actions) != len(deciding):
            raise ValueError(f"{b}: got {len(actions)} actions for {len(deciding)} agents")
        infos, next_order = [], []
        # A lagging agent that ended last step now comes back with its reset observation.
        for agent in self.agents[b]:
            if agent.waiting_reset:
                agent.restart()
                infos.append(self._info(agent, 0.0))
                next_order.append(agent)
        for k, agent in enumerate(deciding):
            if self.action_masks and actions:
                given = tuple(actions[k].discrete_actions)
                self.illegal += any(a == m for a, m in zip(given, self.masked(agent.t, agent.id)))
            agent.code = self._action_code(actions[k]) if actions else 0.0
            agent.t += 1
            if agent.t < agent.length:
                infos.append(self._info(agent, 0.1))
                next_order.append(agent)
                continue
            interrupted = (agent.episode + 1) % self.interrupt_every == 0
            infos.append(self._info(agent, 0.1 if interrupted else 1.0, True, interrupted))
            if agent.id % 100 in self.lagging:
                agent.waiting_reset = True
            else:
                agent.restart()
                infos.append(self._info(agent, 0.0))
                next_order.append(agent)
        self._decision_order[b] = next_order
        return infos

    def _academy(self, brains: Sequence[str] = ()) -> UnityRLInitializationOutputProto:
        """The academy's parameters, with the ``BrainParameters`` of ``brains``."""
        if self.is_discrete:
            spec = ActionSpecProto(
                num_discrete_actions=len(DISCRETE_BRANCHES), discrete_branch_sizes=DISCRETE_BRANCHES
            )
        else:
            spec = ActionSpecProto(num_continuous_actions=CONTINUOUS_SIZE)
        return UnityRLInitializationOutputProto(
            name="ScriptedMockAcademy",
            communication_version=UnityEnvironment.API_VERSION,
            package_version="mock",
            log_path="",
            brain_parameters=[
                BrainParametersProto(brain_name=b, is_training=True, action_spec=spec)
                for b in brains
            ],
        )

    def _output(self, infos: dict[str, Any]) -> UnityOutputProto:
        """One message; the first to carry a behavior's agents also carries its spec."""
        new = [b for b in self._unsent if infos[b].value]
        self._unsent = [b for b in self._unsent if b not in new]
        rl_output = UnityRLOutputProto(agentInfos=infos)
        if not new:
            return UnityOutputProto(rl_output=rl_output)
        return UnityOutputProto(rl_initialization_output=self._academy(new), rl_output=rl_output)

    def initialize(self, inputs: UnityInputProto, poll_callback: Any = None) -> UnityOutputProto:
        # Unity's RpcCommunicator.Initialize sends the academy parameters alone.
        self._reset_all()
        return UnityOutputProto(rl_initialization_output=self._academy())

    def exchange(self, inputs: UnityInputProto, poll_callback: Any = None) -> UnityOutputProto:
        self.exchanges += 1
        rl_in = inputs.rl_input
        if rl_in.command == RESET:
            return self._output(self._reset_all())
        infos = {}
        for b in self.behaviors:
            actions = list(rl_in.agent_actions[b].value) if b in rl_in.agent_actions else []
            infos[b] = UnityRLOutputProto.ListAgentInfoProto(value=self._step_behavior(b, actions))
        return self._output(infos)


class MockUnityEnvironment(UnityEnvironment):
    """A ``UnityEnvironment`` talking to an in-process mock instead of a Unity player."""

    def __init__(self, seed: int = 0, stock: bool = False, **mock_kwargs: Any) -> None:
        if stock:
            self.mock = MockCommunicator(**mock_kwargs)
        else:
            self.mock = ScriptedCommunicator(**mock_kwargs)
        super().__init__(file_name=None, worker_id=0, seed=seed)

    def _get_communicator(self, worker_id: int, base_port: int, timeout_wait: int) -> Any:
        # Called from UnityEnvironment.__init__ in place of opening a gRPC port.
        return self.mock

    def _poll_process(self) -> None:
        # No player process to watch.
        return None
