"""Starting workers: locally (subprocesses, optionally inside emulated hosts) or under torchrun."""

from cadence.launch.local import launch_local, torchrun_env_present

__all__ = ["launch_local", "torchrun_env_present"]
