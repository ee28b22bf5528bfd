"""The models `cadence bench collectives` predicts its rows with, fitted to the calibration's
gloo calls timed in the same rounds as the rows.

Beta and all-reduce's alpha come from gloo's all-reduce at `calibration_sizes` (the midpoints
of the rows' sizes), and on token-bucket links the processor time per byte
(`AlphaBeta.cpu_s_per_byte`); all-gather and broadcast get an alpha of their own from their
calls at `LATENCY_SIZES` when timed. No row is a point any model was fitted to.
"""

from __future__ import annotations

import math
from contextlib import suppress
from dataclasses import dataclass, replace
from typing import Any

from cadence.bench.collectives import (
    CollectivesBenchConfig,
    build_rows,
    gloo_local_s,
)
from cadence.comm.calibrate import fit, with_collective_alphas
from cadence.comm.cost import GLOO_ALGORITHMS, AlphaBeta
from cadence.comm.local_copy import LocalCopyTimes


def calibration_sizes(sizes: tuple[int, ...]) -> tuple[int, ...]:
    """Sizes at which the calibration times gloo's all-reduce: the geometric midpoints of
    `sizes` (2 KB, 8 KB, ..., 32 MB for the default 1 KB to 64 MB), so no row it predicts is
    a point it was fitted to; half the smallest and twice the largest are added when that
    leaves fewer than two (the fit needs a latency- and a bandwidth-bound size)."""
    ordered = sorted(set(sizes))
    mids = [round(math.sqrt(a * b) / 4) * 4 for a, b in zip(ordered, ordered[1:], strict=False)]
    if len(mids) < 2:
        mids = [max(4, ordered[0] // 8 * 4), *mids, 2 * ordered[-1]]
    return tuple(mids)


def link_models(
    sizes: list[int], seconds: list[float], world_size: int, bucket_bytes: float = 0.0
) -> dict[str, AlphaBeta]:
    """Both link models fitted (alpha where latency decides, beta where bandwidth does) to
    gloo's all-reduce timed at `sizes`, the token-bucket one with the links' `bucket_bytes`
    as its burst (`AlphaBeta.burst_bytes`). That one is left out when the sizes do not reach
    both regimes (the serialising fit then falls back to one line through all)."""
    models = {"serialising": fit(sizes, seconds, world_size, "regimes")}
    with suppress(ValueError):  # one regime only: no token-bucket fit
        fitted = fit(sizes, seconds, world_size, "regimes", overlap=True)
        models["token-bucket"] = replace(fitted, burst_bytes=bucket_bytes)
    return models


def latency_models(
    model: AlphaBeta,
    timed: dict[str, list[tuple[int, float]]],
    hosts: int,
    local: LocalCopyTimes | None = None,
) -> dict[str, AlphaBeta]:
    """gloo collective -> `model` with alpha fitted to that collective's own calls (`timed[c]`:
    (bytes, the slowest rank's median seconds) pairs; `calibrate.with_collective_alphas`), the
    local copies gloo's binding adds (`gloo_local_s`) taken off first, as the rows add them
    back. A collective none of whose calls latency decides (a slow link) is left out: `model`
    prices it."""
    local = local or LocalCopyTimes.none()
    network = {c: [(n, t - gloo_local_s(c, n, hosts, local)) for n, t in points]
               for c, points in timed.items()}  # fmt: skip
    own = dict(with_collective_alphas(model, network, hosts).collective_alphas)
    return {c: replace(model, alpha_s=own[GLOO_ALGORITHMS[c][0]])
            for c in timed if GLOO_ALGORITHMS[c][0] in own}  # fmt: skip


@dataclass(frozen=True)
class RunFit:
    """The calibration of one benchmark run: every link model and what it was fitted to."""

    models: dict[str, AlphaBeta]
    """Link model ("token-bucket", "serialising") -> the all-reduce fit (`link_models`)."""
    by_collective: dict[str, dict[str, AlphaBeta]]
    """Link model -> gloo collective -> its own latency fit (`latency_models`); collectives
    absent here are priced with `models`."""
    points: tuple[dict[str, Any], ...]
    """The calibration's timed gloo calls, as the worker records them (collective,
    implementation, algorithm, nbytes, measured_s)."""
    config: CollectivesBenchConfig
    """The run's configuration (hosts, link)."""
    local: LocalCopyTimes
    """The run's local copy times (priced into all-gather)."""

    @property
    def all_reduce_sizes(self) -> list[int]:
        return sorted(p["nbytes"] for p in self.points if p["collective"] == "all_reduce")

    def alphas(self, kind: str) -> dict[str, float]:
        """gloo collective -> the alpha its rows are priced with, all-reduce's first."""
        return {"all_reduce": self.models[kind].alpha_s,
                **{c: m.alpha_s for c, m in self.by_collective[kind].items()}}  # fmt: skip

    def rows(self, kind: str) -> list[dict[str, Any]]:
        """The timed calibration calls, each with what link model `kind` predicts for it,
        priced as the benchmark's rows are (`build_rows`)."""
        priced = build_rows(self.config, list(self.points), self.models[kind], self.local,
                            self.by_collective[kind])  # fmt: skip
        return [{"collective": r.collective, "nbytes": r.nbytes, "measured_s": r.measured_s,
                 "predicted_s": r.predicted_s} for r in priced]  # fmt: skip


def fit_run(
    config: CollectivesBenchConfig, points: list[dict[str, Any]], local: LocalCopyTimes
) -> RunFit:
    """Fit every link model to the all-reduce calls among `points` and, for each, the other
    collectives' own alphas to theirs."""
    all_reduce = sorted((p["nbytes"], p["measured_s"]) for p in points
                        if p["collective"] == "all_reduce")  # fmt: skip
    models = link_models([n for n, _ in all_reduce], [t for _, t in all_reduce], config.hosts,
                         config.bucket_bytes())  # fmt: skip
    own: dict[str, list[tuple[int, float]]] = {}
    for p in points:
        if p["collective"] != "all_reduce":
            own.setdefault(p["collective"], []).append((p["nbytes"], p["measured_s"]))
    by_collective = {k: latency_models(m, own, config.hosts, local) for k, m in models.items()}
    return RunFit(models, by_collective, tuple(points), config, local)

