"""Per-block profiling: forward, input-gradient and weight-gradient times, bytes and memory.

`profile_model` measures any `BlockModel`; `profile_zoo_model` builds a zoo model with a
synthetic batch; `profile_command` is the CLI entry (prints a table, saves JSON).
"""

from cadence.profile.command import format_table, profile_command
from cadence.profile.measure import profile_model, profile_zoo_model
from cadence.profile.record import BlockProfile, Profile

__all__ = [
    "BlockProfile",
    "Profile",
    "format_table",
    "profile_command",
    "profile_model",
    "profile_zoo_model",
]
