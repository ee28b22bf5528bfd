"""A calibration's saved form and its fits: the alpha-beta model of collectives timed on a
process group (`cadence.comm.calibrate` times them), free of torch, so a prediction that reads
a saved calibration does not import it.

`fit` fits alpha and beta to all-reduce with the cost model's own ring formula, the algorithm
gloo uses on CPU. The default fit ("regimes") takes alpha from the sizes whose time sits near
the smallest one (latency decides them) and beta from those far above it (bandwidth decides
them): a single-line fit over all sizes ("minimax" or "relative_ls" relative error, also
offered) lets a few noisy small sizes, or an emulated link's token bucket passing small
transfers faster than its cap, pull beta far from the link's rate (on 2 emulated hosts at
400mbit the minimax line put a 50 MB/s link at 99 MB/s). Gloo's reduction cost is linear in
bytes like the transfer, so it is folded into beta (gamma = 0). Other collectives get alphas
of their own (`with_collective_alphas`), and each call's processor time is kept per call and
per byte sent (`with_host_costs`).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from cadence.comm.calibrate_plan import MODEL_OF, P2P_MODEL_OF
from cadence.comm.cost import AlphaBeta
from cadence.errors import UserError

FITTED = "all_reduce"
OBJECTIVES = ("regimes", "minimax", "relative_ls")
LATENCIES = ("by-size", "fitted")
"""How a simulator prices all-reduce's per-message latency from a calibration: at each
message's own size (`Calibration.sized_model`) or with the one fitted alpha."""
HOST_BYTE_FROM = 1 << 20
"""All-reduce calls from this size up give the processor time per byte (`with_host_costs`):
there the bytes' copies, reduction and socket work outweigh the call's fixed cost."""
# A size whose time is this many times the smallest's counts as bandwidth-bound (as "regimes").
_BANDWIDTH_BOUND = 8.0


@dataclass(frozen=True)
class CalibrationRow:
    """One (collective, size) point of the calibration table."""

    collective: str
    """A collective `calibrate_plan.MODEL_OF` names: gloo's "all_reduce", "broadcast" or
    "all_gather", or cadence's own "ring_all_reduce", "ring_reduce_scatter" or
    "ring_all_gather"."""
    nbytes: int
    """Message size in bytes (for all_gather: the gathered output, n / p per rank)."""
    measured_s: float
    """Median seconds per call on the slowest rank."""
    predicted_s: float
    """Seconds the fitted model predicts."""
    cpu_s: float | None = None
    """Median processor seconds per call on the busiest rank, all of its process's threads
    (`cadence.comm.calibrate.measure`); None in calibrations made before it was measured."""

    @property
    def rel_error(self) -> float:
        """(predicted - measured) / measured."""
        return (self.predicted_s - self.measured_s) / self.measured_s


@dataclass(frozen=True)
class Calibration:
    """A fitted network model and the measurements behind it."""

    model: AlphaBeta
    """Fitted on all_reduce only; other collectives' rows test how far it transfers."""
    world_size: int
    """Ranks in the calibrated group."""
    backend: str
    """Process-group backend, e.g. "gloo"."""
    repeats: int
    """Timed rounds per size (after warm-up); each round times 3-64 single calls."""
    objective: str
    """How alpha and beta were fitted: one of `OBJECTIVES`."""
    rows: tuple[CalibrationRow, ...]
    """Measured vs predicted, by collective then size."""
    torch_version: str
    """torch.__version__ of the run."""

    def max_rel_error(self, collective: str = FITTED) -> float:
        """Largest |relative error| over `collective`'s rows."""
        errors = [abs(r.rel_error) for r in self.rows if r.collective == collective]
        if not errors:
            raise ValueError(f"no {collective!r} rows; measured: {self.collectives()}")
        return max(errors)

    def collectives(self) -> list[str]:
        """Collectives with rows, in table order."""
        return list(dict.fromkeys(r.collective for r in self.rows))

    def table(self) -> str:
        """Human-readable table of the rows and the fitted parameters."""
        lines = [
            f"alpha {self.model.alpha_s * 1e6:.2f} us, beta {self.model.beta_s_per_byte * 1e9:.4f}"
            f" ns/B ({1e-9 / max(self.model.beta_s_per_byte, 1e-30):.2f} GB/s), "
            f"world {self.world_size}, {self.backend}"
            + "".join(
                f"; {c} alpha {a * 1e6:.2f} us" for c, a in self.model.collective_alphas
            )
            + "".join(f"; cadence {c} alpha {a * 1e6:.2f} us" for c, a in self.model.p2p_alphas)
            + _host_line(self.model),
            f"{'collective':<20}{'bytes':>10}{'measured ms':>13}{'predicted ms':>14}{'error':>8}",
        ]
        for r in self.rows:
            lines.append(
                f"{r.collective:<20}{r.nbytes:>10}{r.measured_s * 1e3:>13.4f}"
                f"{r.predicted_s * 1e3:>14.4f}{r.rel_error * 100:>7.1f}%"
            )
        return "\n".join(lines)

    def sized_model(self) -> AlphaBeta:
        """`model` with all-reduce's latency taken at each measured size (`AlphaBeta.
        allreduce_alphas`): each all-reduce row's time less its wire and reduction terms, per
        message, at least 0 (`model` itself without all-reduce rows). The wire term's beta is
        refitted on the bandwidth-bound rows alone (a relative least-squares line through
        them), so an alpha fitted on the small calls does not leak into it. On 2 emulated
        hosts at 400mbit four calibrations timed 1-16 KB calls at 0.6-3.5 ms and fitted alphas
        of 294-1414 us, while their calls from 64 KB up agree within 3.1% (from 256 KB up,
        0.11%) and leave 0-90 us a message."""
        if self.model.overlap:
            raise ValueError("a token-bucket (overlap) fit has no per-size latency to take")
        rows = sorted((r for r in self.rows if r.collective == FITTED), key=lambda r: r.nbytes)
        if not rows:  # a model written by hand: its one alpha is all there is
            return self.model
        floor = min(r.measured_s for r in rows)
        wide = [r for r in rows if r.measured_s >= _BANDWIDTH_BOUND * floor]
        model = self.model
        if len(wide) >= 2:
            line = fit([r.nbytes for r in wide], [r.measured_s for r in wide], self.world_size,
                       "relative_ls")  # fmt: skip
            model = replace(model, beta_s_per_byte=line.beta_s_per_byte)
        points = []
        for row in rows:
            terms = model.terms(*MODEL_OF[FITTED], row.nbytes, self.world_size)
            rest = row.measured_s - model.beta_s_per_byte * terms.wire_bytes
            rest -= model.gamma_s_per_byte * terms.reduce_bytes
            points.append((float(row.nbytes), max(0.0, rest / max(terms.messages, 1.0))))
        return replace(model, allreduce_alphas=tuple(points))

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> Calibration:
        data = json.loads(text)
        return cls(
            # Files from before the flag are calibrations all the same.
            model=AlphaBeta(**{"calibrated": True, **data["model"]}),
            world_size=int(data["world_size"]),
            backend=str(data["backend"]),
            repeats=int(data["repeats"]),
            objective=str(data["objective"]),
            rows=tuple(CalibrationRow(**row) for row in data["rows"]),
            torch_version=str(data["torch_version"]),
        )

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n")

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        """Read a saved calibration; a missing or malformed file is a one-line UserError."""
        try:
            return cls.from_json(Path(path).read_text())
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UserError(f"cannot read calibration {path}: {exc}") from None


def _host_line(model: AlphaBeta) -> str:
    """The processor time of the calls, for `Calibration.table` (empty where not measured)."""
    if not model.measures_host:
        return ""
    calls = [f"{c} {s * 1e6:.0f} us" for c, s in model.host_s_per_call]
    calls += [f"cadence {c} {s * 1e6:.0f} us" for c, s in model.p2p_host_s_per_call]
    rate = model.host_s_per_wire_byte * 1e9
    return f"; processor time per call: {', '.join(calls)}, {rate:.3f} ns per byte sent"


def _ternary_min(f: Callable[[float], float], lo: float, hi: float, steps: int = 80) -> float:
    # Argmin of a convex function on [lo, hi]; (2/3)^80 leaves ~1e-14 of the interval.
    for _ in range(steps):
        x1, x2 = lo + (hi - lo) / 3, hi - (hi - lo) / 3
        if f(x1) < f(x2):
            hi = x2
        else:
            lo = x1
    return (lo + hi) / 2


def _fit_regimes(
    messages: np.ndarray, wire: np.ndarray, t: np.ndarray, overlap: bool = False
) -> AlphaBeta | None:
    """Alpha from the latency-bound sizes, beta from the bandwidth-bound ones (None: the sizes
    do not reach both regimes). Alpha is the median over its sizes after taking off the wire
    term, beta their total time less alpha's share over their total bytes; a few rounds
    settle both (exact data gives back the exact parameters).

    A size near the floor counts for alpha only while the fitted wire term is at most half its
    time: an emulated link's token bucket passes mid sizes (16-64 KB at 400mbit) about as fast
    as the smallest, and taking their wire term off their time would leave alpha near zero.
    With `overlap` see `_fit_token_bucket`.
    """
    floor = float(t.min())
    near_floor = t < 4 * floor
    bandwidth = t >= _BANDWIDTH_BOUND * floor
    if not near_floor.any() or not bandwidth.any():
        return None
    if overlap:
        return _fit_token_bucket(messages, wire, t, near_floor, bandwidth)
    smallest = t == floor
    alpha = beta = 0.0
    for _ in range(50):
        latency = near_floor & (beta * wire <= 0.5 * t)
        latency = latency if latency.any() else smallest
        alpha = max(0.0, float(np.median((t - beta * wire)[latency] / messages[latency])))
        # Total time over total bytes: the largest transfers, whose time alpha hardly
        # touches, weigh most.
        rest = t[bandwidth].sum() - alpha * messages[bandwidth].sum()
        beta = max(0.0, float(rest / wire[bandwidth].sum()))
    return AlphaBeta(alpha_s=alpha, beta_s_per_byte=beta)


def _fit_token_bucket(
    messages: np.ndarray,
    wire: np.ndarray,
    t: np.ndarray,
    near_floor: np.ndarray,
    bandwidth: np.ndarray,
) -> AlphaBeta:
    """The `_fit_regimes` of a token-bucket link (`AlphaBeta.overlap`), where a size costs the
    larger of its latency and its transfer. Beta is the bandwidth-bound sizes' total time
    over their total bytes. Alpha and the processor time per byte (`AlphaBeta.cpu_s_per_byte`)
    come from the near-floor sizes whose transfer is below their latency
    (`_fit_latency_line`), starting from the smallest size's time as all latency: a size at
    the crossing, where both terms are equal, then joins only if the line through the others
    reaches it (from an empty start it would pull the line up to itself)."""
    beta = max(0.0, float(t[bandwidth].sum() / wire[bandwidth].sum()))
    smallest = t == t.min()
    alpha, cpu = _fit_latency_line(messages[smallest], wire[smallest], t[smallest])
    for _ in range(50):
        latency = near_floor & (beta * wire < alpha * messages + cpu * wire)
        latency = latency if latency.any() else smallest
        alpha, cpu = _fit_latency_line(messages[latency], wire[latency], t[latency])
    return AlphaBeta(alpha_s=alpha, beta_s_per_byte=beta, overlap=True, cpu_s_per_byte=cpu)


def _fit_latency_line(
    messages: np.ndarray, wire: np.ndarray, t: np.ndarray
) -> tuple[float, float]:
    """(alpha, cpu) >= 0 with t = alpha * messages + cpu * wire, least squares in relative
    error over latency-bound calls; cpu = 0 and alpha their median time per message when
    the calls span fewer than two sizes (no slope to take) or the slope comes out negative."""
    plain = (max(0.0, float(np.median(t / messages))), 0.0)
    if len(np.unique(wire)) < 2:
        return plain
    design = np.stack([messages, wire], axis=1) / t[:, None]
    alpha, cpu = np.linalg.lstsq(design, np.ones_like(t), rcond=None)[0]
    if cpu < 0 or alpha < 0:
        return plain
    return float(alpha), float(cpu)


def fit(
    sizes: Sequence[int],
    seconds: Sequence[float],
    world_size: int,
    objective: str = "regimes",
    overlap: bool = False,
) -> AlphaBeta:
    """Non-negative alpha, beta for the ring all-reduce formula (`overlap`: on a token-bucket
    link, `AlphaBeta.overlap`; "regimes" only).

    "regimes" (default) fits alpha where latency decides and beta where bandwidth decides, so
    the large transfers that dominate training steps get the link's real rate; it falls back
    to "relative_ls" when the sizes do not reach both regimes. "minimax" minimises the worst
    |relative error| over all sizes (convex, nested ternary search); "relative_ls" minimises
    the sum of squared relative errors (closed form).
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; accepted: {', '.join(OBJECTIVES)}")
    if overlap and objective != "regimes":
        raise ValueError(f"an overlap fit takes objective 'regimes', not {objective!r}")
    unit = AlphaBeta(0.0, 0.0)
    terms = [unit.terms("allreduce", "ring", n, world_size) for n in sizes]
    t = np.asarray(seconds, dtype=np.float64)
    if objective == "regimes":
        messages = np.array([tm.messages for tm in terms], dtype=np.float64)
        wire = np.array([tm.wire_bytes for tm in terms], dtype=np.float64)
        split = _fit_regimes(messages, wire, t, overlap)
        if split is not None:
            return split
        if overlap:
            raise ValueError("an overlap fit needs latency- and bandwidth-bound sizes")
    # Row i of design @ (alpha, beta) is predicted_i / measured_i; the target is all ones.
    design = np.array([[tm.messages, tm.wire_bytes] for tm in terms]) / t[:, None]
    if objective == "minimax":

        def worst(a: float, b: float) -> float:
            return float(np.max(np.abs(design @ (a, b) - 1.0)))

        def best_beta(a: float) -> float:
            return _ternary_min(lambda b: worst(a, b), 0.0, float(np.max(1 / design[:, 1])))

        alpha = _ternary_min(lambda a: worst(a, best_beta(a)), 0.0, float(np.max(1 / design[:, 0])))
        return AlphaBeta(alpha_s=alpha, beta_s_per_byte=best_beta(alpha))
    # Non-negative least squares in 2 variables: the free optimum if feasible, else the better
    # one-parameter fit (the only other vertices).
    candidates = [np.linalg.lstsq(design, np.ones_like(t), rcond=None)[0]]
    for col in (0, 1):
        x = np.zeros(2)
        x[col] = design[:, col].sum() / float(design[:, col] @ design[:, col])
        candidates.append(x)
    feasible = [c for c in candidates if c[0] >= 0 and c[1] >= 0]
    best = min(feasible, key=lambda c: float(np.sum((design @ c - 1.0) ** 2)))
    return AlphaBeta(alpha_s=float(best[0]), beta_s_per_byte=float(best[1]))


def fit_latency(
    model: AlphaBeta,
    collective: str,
    algorithm: str,
    sizes: Sequence[int],
    seconds: Sequence[float],
    world_size: int,
) -> AlphaBeta:
    """`model` with its alpha refitted to one collective's latency-bound calls, beta kept.

    One alpha fitted on all-reduce prices every collective's messages alike, but a gloo call's
    fixed cost differs by collective (the software around the messages, and on shared cores
    how many threads each of its steps wakes): on 4 emulated hosts at 400mbit, 1-16 KB
    all-gathers (3 messages) took 0.83-0.87 ms where all-reduce's alpha (6 messages in 1.33-1.45
    ms) priced 0.70 ms, and broadcasts streamed from one root took 0.28-0.31 ms against 0.46.
    Alpha is the median, over `sizes`, of each call's time less its wire term (on a
    token-bucket link, where the larger term alone counts, less its processor time per byte,
    `AlphaBeta.cpu_s_per_byte`) over its message count; only sizes whose wire term is at most
    half their time count (a ValueError if none is)."""
    if len(sizes) != len(seconds) or not sizes:
        raise ValueError(f"need one time per size, got {len(sizes)} sizes, {len(seconds)} times")
    per_message = []
    for n, t in zip(sizes, seconds, strict=True):
        terms = model.terms(collective, algorithm, n, world_size)
        wire = model.beta_s_per_byte * terms.wire_bytes
        if terms.messages and wire <= 0.5 * t:
            taken = model.cpu_s_per_byte * terms.wire_bytes if model.overlap else wire
            per_message.append((t - taken) / terms.messages)
    if not per_message:
        raise ValueError(f"no latency-bound {collective} size in {list(sizes)}")
    return replace(model, alpha_s=max(0.0, float(np.median(per_message))))


def with_collective_alphas(
    model: AlphaBeta, timed: Mapping[str, Sequence[tuple[int, float]]], world_size: int
) -> AlphaBeta:
    """`model` with an alpha of their own for the collectives in `timed` (name as `MODEL_OF`
    -> (bytes, seconds) of its calls), each fitted by `fit_latency`: gloo's in
    `AlphaBeta.collective_alphas`, cadence's own ("ring_*") in `AlphaBeta.p2p_alphas`. One with
    no latency-bound size keeps the model's alpha. All-reduce's own alpha stays `alpha_s`."""
    pairs: dict[bool, list[tuple[str, float]]] = {False: [], True: []}
    for collective, points in timed.items():
        if collective == FITTED:
            continue
        name, algorithm = MODEL_OF[collective]
        sizes, seconds = [n for n, _ in points], [t for _, t in points]
        try:
            own = fit_latency(model, name, algorithm, sizes, seconds, world_size)
        except ValueError:
            continue
        pairs[collective in P2P_MODEL_OF].append((name, own.alpha_s))
    return replace(model, collective_alphas=tuple(pairs[False]), p2p_alphas=tuple(pairs[True]))


def with_host_costs(
    model: AlphaBeta, busy: Mapping[str, Sequence[tuple[int, float]]], world_size: int
) -> AlphaBeta:
    """`model` with the processor time of each collective's calls (`AlphaBeta.
    host_s_per_call`, `p2p_host_s_per_call`, `host_s_per_wire_byte`), from `busy`: name as
    `MODEL_OF` -> (bytes, processor seconds) of its calls (`cadence.comm.calibrate.measure`).

    The time per byte sent is all-reduce's: its calls from `HOST_BYTE_FROM` up, less its
    fixed cost (the median of its smaller calls less their bytes' share), over their wire
    bytes (0 without such calls). Each collective's fixed cost is
    the median over its sizes of a call's time less its bytes' share (at least 0); cadence's
    own are timed at small sizes only, where the bytes hardly count, and share all-reduce's
    rate per byte (their bytes go through the same gloo transport)."""
    if FITTED not in busy or world_size < 2:
        return model

    def wire(collective: str, nbytes: int) -> float:
        return model.terms(*MODEL_OF[collective], nbytes, world_size).wire_bytes

    points = busy[FITTED]
    small = [(n, t) for n, t in points if n < HOST_BYTE_FROM] or points
    large = [(n, t) for n, t in points if n >= HOST_BYTE_FROM]
    fixed = per_byte = 0.0
    for _ in range(20):  # each part taken off the other's calls settles both (exact data: exact)
        fixed = max(0.0, statistics.median(t - per_byte * wire(FITTED, n) for n, t in small))
        if large:
            spent = sum(t for _, t in large) - fixed * len(large)
            per_byte = max(0.0, spent / sum(wire(FITTED, n) for n, _ in large))
    pairs: dict[bool, list[tuple[str, float]]] = {False: [], True: []}
    for collective, calls in busy.items():
        own = statistics.median(max(0.0, t - per_byte * wire(collective, n)) for n, t in calls)
        pairs[collective in P2P_MODEL_OF].append((MODEL_OF[collective][0], own))
    return replace(
        model, host_s_per_call=tuple(pairs[False]), p2p_host_s_per_call=tuple(pairs[True]),
        host_s_per_wire_byte=per_byte,
    )  # fmt: skip


def predicted_s(model: AlphaBeta, collective: str, nbytes: int, world_size: int) -> float:
    """What `model` predicts for one call of `collective` (name as `MODEL_OF`): cadence's own
    collectives priced by `AlphaBeta.p2p`."""
    name, algorithm = MODEL_OF[collective]
    priced = model.p2p() if collective in P2P_MODEL_OF else model
    return priced.time(name, algorithm, nbytes, world_size)


def calibrated_link(path: str | Path, latency: str = "by-size") -> AlphaBeta:
    """The link model of a saved calibration, all-reduce's latency priced as `latency` says
    (one of `LATENCIES`); a bad file or choice is a one-line UserError."""
    if latency not in LATENCIES:
        accepted = ", ".join(LATENCIES)
        raise UserError(f"unknown calibration latency {latency!r}; accepted: {accepted}")
    calibration = Calibration.load(path)
    if latency == "fitted":
        return calibration.model
    try:
        return calibration.sized_model()
    except ValueError as exc:
        raise UserError(f"{path}: {exc}; use --calibration-latency fitted") from None
