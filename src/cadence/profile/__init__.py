"""Per-block profiling: forward, input-gradient and weight-gradient times, bytes and memory.

`profile_model` measures any `BlockModel`; `profile_zoo_model` builds a zoo model with a
synthetic batch; `profile_command` is the CLI entry (prints a table, saves JSON).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cadence._lazy import lazy_names

# The record is plain data the simulator reads; measuring needs torch, so it loads on use.
if TYPE_CHECKING:
    from cadence.profile.command import format_table, profile_command
    from cadence.profile.measure import profile_model, profile_zoo_model
    from cadence.profile.record import BlockProfile, Profile

_HOMES = {
    "BlockProfile": "cadence.profile.record",
    "Profile": "cadence.profile.record",
    "format_table": "cadence.profile.command",
    "profile_command": "cadence.profile.command",
    "profile_model": "cadence.profile.measure",
    "profile_zoo_model": "cadence.profile.measure",
}

__all__ = [
    "BlockProfile",
    "Profile",
    "format_table",
    "profile_command",
    "profile_model",
    "profile_zoo_model",
]

__getattr__ = lazy_names(__name__, _HOMES)
