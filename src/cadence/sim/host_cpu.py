"""Processor time that communication takes from compute on a host with no spare core.

A collective call keeps its host's processors busy for a while: gloo's I/O threads, the thread
that issued it (for cadence's own collectives, Python driving each ring step) and the kernel's
socket work. `cadence calibrate` measures that time per call and per byte sent
(`AlphaBeta.host_s`). Where the workers' compute already keeps every core of the host busy
(workers per host x intra-op threads >= cores, as on one machine running several CPU
workers), the time is taken from the compute: the simulator charges it there, time-sliced
with the compute as the OS shares a core between two busy threads, scaled by how far the
cores are oversubscribed (4 workers on 2 cores: each call's time twice, since every
worker's calls share the same 2 cores). With a core to spare it runs there and the compute
does not pay it. On a GPU the compute is the device's, and nothing is charged.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from cadence.comm.cost import AlphaBeta
from cadence.sim.options import SimOptions

if TYPE_CHECKING:  # the profile's fields only: no torch to import
    from cadence.profile import Profile


def compute_share(profile: Profile) -> float:
    """How much of each call's processor time a worker's compute pays, from the conditions
    the profile was taken in: busy threads (`threads` x (1 + `neighbours`)) over the host's
    cores (`host_cores`) when they fill them, else 0 (a spare core, a GPU, or a profile that
    did not record its host's cores)."""
    if profile.device != "cpu" or not profile.host_cores:
        return 0.0
    busy = profile.threads * (1 + profile.neighbours)
    return busy / profile.host_cores if busy >= profile.host_cores else 0.0


def describe(profile: Profile, link: AlphaBeta) -> str:
    """What a prediction assumed of communication's processor time, for `cadence simulate`."""
    share = compute_share(profile)
    if not link.measures_host:
        return "communication's processor time not charged (not measured: no calibration)"
    if profile.device != "cpu":
        return "communication's processor time not charged (the compute is the device's)"
    if not profile.host_cores:
        return "communication's processor time not charged (the profile did not record its cores)"
    if share == 0:
        return "communication's processor time not charged (the profiled host has a spare core)"
    busy = profile.threads * (1 + profile.neighbours)
    return (
        f"communication's processor time charged to compute x{share:.2g} ({busy} busy "
        f"threads on {profile.host_cores} cores)"
    )


def charged(options: SimOptions, link: AlphaBeta, world_size: int) -> SimOptions:
    """`options` with `host_cpu_share` of each gloo all-reduce's measured processor time
    (`AlphaBeta.host_s`) added to the per-call and per-byte charges the data-parallel
    adapters take from compute (`SimOptions.comm_cpu_s_per_message`, `_per_byte`)."""
    share = options.host_cpu_share
    if share <= 0 or world_size < 2 or not link.host_s_per_call:
        return options
    per_call = link.host_s("allreduce", "ring", 0, world_size)
    per_byte = link.host_s("allreduce", "ring", 1 << 20, world_size) - per_call
    return dataclasses.replace(
        options,
        comm_cpu_s_per_message=options.comm_cpu_s_per_message + share * per_call,
        comm_cpu_s_per_byte=options.comm_cpu_s_per_byte + share * per_byte / (1 << 20),
    )
