"""wheeler2: cooperative multi-algorithm reinforcement learning."""

__version__ = "0.1.0"
