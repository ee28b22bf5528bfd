"""Communication cost models: wire-time bounds and the alpha-beta(-gamma) model of collectives.

`AlphaBeta` prices one collective as `alpha * messages + beta * bytes + gamma * reduced_bytes`
along the critical path (Hockney's model with Thakur/Rabenseifner's per-algorithm counts).
`n` is always the size in bytes of the full vector a rank ends up with (allreduce, broadcast,
reduce), or of the concatenation of all p blocks (gather, allgather, scatter, reduce-scatter,
all-to-all: each rank's block is n / p), so one `n` compares algorithms of the same collective.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

# collective -> accepted algorithms (the first is the default gloo/MPI choice on CPU, except
# that gloo's own broadcast is "binomial_eager": see `_eager_binomial_paths`).
ALGORITHMS: dict[str, tuple[str, ...]] = {
    "p2p": ("direct",),
    "broadcast": ("binomial", "chain", "binomial_eager"),
    "reduce": ("binomial",),
    "allreduce": ("ring", "halving_doubling", "tree"),
    "gather": ("binomial",),
    "allgather": ("ring", "bruck"),
    "scatter": ("binomial",),
    "reduce_scatter": ("ring",),
    "all_to_all": ("pairwise",),
}
# torch.distributed collective -> (collective, algorithm) above of gloo's CPU implementation,
# to price gloo's own calls. Its reduce-scatter all-reduces the whole input and keeps one block,
# so it costs a ring all-reduce of the full vector; its broadcast posts all of a rank's sends at
# once ("binomial_eager"); its all-gather and all-reduce are rings.
GLOO_ALGORITHMS: dict[str, tuple[str, str]] = {
    "all_reduce": ("allreduce", "ring"),
    "reduce_scatter": ("allreduce", "ring"),
    "all_gather": ("allgather", "ring"),
    "broadcast": ("broadcast", "binomial_eager"),
    "all_to_all": ("all_to_all", "pairwise"),
}


def ring_allreduce_wire_s(num_bytes: int, world_size: int, bandwidth_bps: float) -> float:
    """Seconds a ring all-reduce of `num_bytes` needs on links of `bandwidth_bps` (bandwidth term
    only): each rank sends and receives 2 (p - 1) / p of the data."""
    return AlphaBeta.from_bandwidth(bandwidth_bps).time("allreduce", "ring", num_bytes, world_size)


@dataclass(frozen=True)
class Terms:
    """Critical-path counts of one collective; time = alpha*messages + beta*wire + gamma*reduce."""

    messages: float
    """Sequential message latencies paid (rounds of the algorithm)."""
    wire_bytes: float
    """Bytes sent (or received) back to back along the critical path."""
    reduce_bytes: float
    """Bytes combined by local reduction along the critical path."""


def _log2_ceil(p: int) -> int:
    return (p - 1).bit_length()  # ceil(log2 p) for p >= 1, exact on integers


def _check(collective: str, algorithm: str, nbytes: int, world_size: int) -> None:
    if collective not in ALGORITHMS:
        raise ValueError(f"unknown collective {collective!r}; accepted: {', '.join(ALGORITHMS)}")
    if algorithm not in ALGORITHMS[collective]:
        accepted = ", ".join(ALGORITHMS[collective])
        raise ValueError(f"unknown {collective} algorithm {algorithm!r}; accepted: {accepted}")
    if nbytes < 0 or world_size < 1:
        raise ValueError(f"need nbytes >= 0 and world_size >= 1, got {nbytes}, {world_size}")


@functools.cache  # a plan prices many broadcasts on one world: build its tree once
def _eager_binomial_paths(p: int) -> tuple[tuple[int, ...], ...]:
    """Every rank's path from the root of a binomial broadcast whose ranks post all their
    sends at once, as gloo's does, as the copies of n each hop's sender posts together: its k
    sends share its uplink and all land k*n*beta after it holds the data (p = 4: rank 3's path
    is (2, 1), 3 n beta in all, where sequential rounds take 2 n beta). Each path once, in
    order of first appearance (half the ranks share their path with another)."""
    # Virtual rank v (root 0) receives from v - 2^h, h its highest set bit, and then sends to
    # v + 2^i for every i above h (every i for the root) that is still a rank.
    paths: dict[int, tuple[int, ...]] = {0: ()}
    for v in range(p):  # parents come before children: v + 2^i > v
        first = v.bit_length()  # bits above v's highest set bit
        children = [v + (1 << i) for i in range(first, _log2_ceil(p)) if v + (1 << i) < p]
        for child in children:
            paths[child] = (*paths[v], len(children))
    return tuple(dict.fromkeys(path for v, path in paths.items() if v))


def _halving_doubling(n: float, p: int) -> Terms:
    # Rabenseifner: reduce-scatter by recursive halving, allgather by recursive doubling, on the
    # largest power of two p2 <= p. The p - p2 extra ranks first fold their whole vector into a
    # partner (one message + reduction) and get the result back at the end (one more message).
    p2 = 1 << (p.bit_length() - 1)
    k = p2.bit_length() - 1
    frac = (p2 - 1) / p2 * n
    terms = Terms(2 * k, 2 * frac, frac)
    if p2 != p:
        terms = Terms(terms.messages + 2, terms.wire_bytes + 2 * n, terms.reduce_bytes + n)
    return terms


@dataclass(frozen=True)
class AlphaBeta:
    """Latency-bandwidth(-compute) model of a network: a message of m bytes costs alpha + m*beta,
    and reducing m bytes locally costs m*gamma."""

    alpha_s: float
    """Per-message latency in seconds (start-up cost, independent of size)."""
    beta_s_per_byte: float
    """Transfer time per byte in seconds (1 / link bandwidth in bytes/s)."""
    gamma_s_per_byte: float = 0.0
    """Local reduction time per byte in seconds; 0 folds reduction cost into beta."""
    overlap: bool = False
    """True for a token-bucket link (tc's tbf, as in the emulated cluster): it holds the
    average rate but does not serialise each message, since tokens gather while a message's
    latency passes, so the critical path costs max(alpha * messages, beta * wire) (+ gamma *
    reduce). False, a real link: each message pays both, alpha * messages + beta * wire."""
    burst_bytes: float = 0.0
    """With `overlap`: the link's token bucket. A rank that idles until its copy arrives and
    then forwards it (gloo's broadcast tree, "binomial_eager") sends up to this many bytes at
    once, from the tokens its link gathered while it waited. The call's first hop pays every
    byte: it starts on a busy link, as in a stream of calls or after a drain. 0: no bucket."""
    cpu_s_per_byte: float = 0.0
    """With `overlap`: processor seconds per byte on the wire that the link cannot hide (the
    copies through each rank's socket layers). They add to the latency term, so a call costs
    max(alpha * messages + cpu * wire, beta * wire): while the link is the bottleneck they pass
    as a rank waits for tokens, while latency is they add to it. On 4 emulated hosts at 1gbit
    16-64 KB calls, where the two terms are close, came out 1.11-1.22x slow without it. A
    serialising link's fitted beta already holds this time. 0: none."""
    collective_alphas: tuple[tuple[str, float], ...] = ()
    """(collective, alpha in seconds) pairs that replace `alpha_s` for those collectives (names
    as in `ALGORITHMS`). A gloo call's fixed cost per message differs by collective (the
    software around the messages); `calibrate()` fits all-gather's and broadcast's here when
    it times them. Empty: `alpha_s` prices every collective's messages."""
    allreduce_alphas: tuple[tuple[float, float], ...] = ()
    """(message bytes, seconds per message) points, by size: all-reduce's latency as measured
    at each size (`Calibration.sized_model`). An all-reduce of n bytes takes the alpha
    interpolated at n on a log scale (the nearest end's outside them), in place of one alpha
    for every size: on shared cores gloo's small calls wait on its polling I/O thread, so the
    latency fitted on them does not carry to the large messages training sends. Empty: one
    alpha (`alpha_for`)."""
    p2p_alphas: tuple[tuple[str, float], ...] = ()
    """(collective, alpha in seconds) pairs for cadence's own collectives
    (`cadence.comm.collectives`, which the ZeRO executor runs): ring steps of gloo sends and
    receives driven from Python, whose fixed cost per message is not a gloo built-in call's
    (on 2 emulated hosts at 150mbit, 0.72 ms a reduce-scatter message, where gloo's
    all-reduce costs 4-32 us a message from 64 KB up). `calibrate()` fits them when it times
    the "ring_*" collectives; `p2p()` prices with them. Empty: cadence's collectives are
    priced as gloo's."""
    host_s_per_call: tuple[tuple[str, float], ...] = ()
    """(collective, seconds) pairs: processor time one gloo call of that collective takes on
    each rank's host, all of the process's threads together (gloo's I/O threads, the caller,
    the kernel's socket work on their behalf), whatever its size; `calibrate()` measures it
    (`calibrate.measure`). A collective without an entry takes all-reduce's. The simulator
    charges it to a worker's compute where the host has no spare core
    (`cadence.sim.host_cpu`). Empty: not measured, charged nothing."""
    p2p_host_s_per_call: tuple[tuple[str, float], ...] = ()
    """The same for cadence's own collectives (ring steps driven from Python, which the ZeRO
    executor runs); `p2p()` puts them in place of gloo's."""
    host_s_per_wire_byte: float = 0.0
    """Processor seconds per byte a call sends along its critical path (`Terms.wire_bytes`):
    the copies, the reduction and the socket work, fitted on all-reduce's large calls."""
    calibrated: bool = False
    """Fitted by `cadence calibrate` on gloo's calls (and cadence's own, over gloo): its alphas
    are those calls' fixed costs per message (software as much as network), which price
    messages sent through gloo, not the parameter server's ZeroMQ ones (`outside_gloo`). False:
    a model given by hand, whose `alpha_s` is the network's latency for every message."""

    def __post_init__(self) -> None:
        fields = ("alpha_s", "beta_s_per_byte", "gamma_s_per_byte", "burst_bytes", "cpu_s_per_byte",
                  "host_s_per_wire_byte")  # fmt: skip
        for name in fields:
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be finite and >= 0, got {value}")
        if self.burst_bytes and not self.overlap:
            raise ValueError("burst_bytes needs overlap=True: a serialising link has no bucket")
        if self.cpu_s_per_byte and not self.overlap:
            raise ValueError("cpu_s_per_byte needs overlap=True: a serialising beta holds it")
        # Saved models come back from JSON as lists: keep the field hashable either way.
        for field in ("collective_alphas", "p2p_alphas", "host_s_per_call", "p2p_host_s_per_call"):
            pairs = tuple((str(c), float(a)) for c, a in getattr(self, field))
            object.__setattr__(self, field, pairs)
            for collective, alpha in pairs:
                if collective not in ALGORITHMS:
                    accepted = ", ".join(ALGORITHMS)
                    raise ValueError(f"unknown collective {collective!r}; accepted: {accepted}")
                if not (math.isfinite(alpha) and alpha >= 0):
                    raise ValueError(f"{field}: {collective} must be finite and >= 0, got {alpha}")
        points = tuple((float(n), float(a)) for n, a in self.allreduce_alphas)
        object.__setattr__(self, "allreduce_alphas", points)
        sizes = [n for n, _ in points]
        if any(n <= 0 or not math.isfinite(n) for n in sizes) or sizes != sorted(set(sizes)):
            raise ValueError(f"allreduce_alphas need increasing sizes > 0, got {sizes}")
        if any(not (math.isfinite(a) and a >= 0) for _, a in points):
            raise ValueError("allreduce_alphas need finite alphas >= 0")

    def alpha_for(self, collective: str, nbytes: float | None = None) -> float:
        """Seconds per message of `collective`: for an all-reduce of `nbytes` with
        `allreduce_alphas`, the latency measured at that size; else its own alpha if it has
        one, else `alpha_s`."""
        if collective == "allreduce" and nbytes is not None and self.allreduce_alphas:
            return _interpolate_log(self.allreduce_alphas, nbytes)
        return dict(self.collective_alphas).get(collective, self.alpha_s)

    def p2p(self) -> AlphaBeta:
        """This link as cadence's own collectives see it: their `p2p_alphas` in place of gloo's
        alphas for those collectives (an all-reduce one also replaces `allreduce_alphas`);
        itself when it has none."""
        if not (self.p2p_alphas or self.p2p_host_s_per_call):
            return self
        own = dict(self.p2p_alphas)
        sized = () if "allreduce" in own else self.allreduce_alphas
        merged = tuple((dict(self.collective_alphas) | own).items())
        host = tuple((dict(self.host_s_per_call) | dict(self.p2p_host_s_per_call)).items())
        return replace(
            self, collective_alphas=merged, allreduce_alphas=sized, p2p_alphas=(),
            host_s_per_call=host, p2p_host_s_per_call=(),
        )  # fmt: skip

    def outside_gloo(self) -> AlphaBeta:
        """This link for messages that do not go through gloo (the parameter server's
        ZeroMQ messages): a calibrated model's rate without its alphas, which are gloo's
        calls' own; itself otherwise."""
        if not self.calibrated:
            return self
        return replace(
            self, alpha_s=0.0, collective_alphas=(), allreduce_alphas=(), p2p_alphas=(),
            calibrated=False,
        )  # fmt: skip

    @property
    def measures_host(self) -> bool:
        """Whether the processor time of its calls was measured (`host_s_per_call`)."""
        return bool(self.host_s_per_call or self.p2p_host_s_per_call)

    def host_s(self, collective: str, algorithm: str, nbytes: int, world_size: int) -> float:
        """Processor seconds one call of `collective` takes on each rank's host
        (`host_s_per_call`, all-reduce's for one without an entry, plus
        `host_s_per_wire_byte` per byte it sends); 0 on one rank or where not measured."""
        if world_size < 2 or not self.host_s_per_call:
            return 0.0
        wire = self.terms(collective, algorithm, nbytes, world_size).wire_bytes
        return self.host_s_sending(collective, wire)

    def host_s_sending(self, collective: str, wire_bytes: float) -> float:
        """`host_s` of a call whose critical path sends `wire_bytes` (`Terms.wire_bytes`),
        for a caller that has its terms already."""
        per_call = dict(self.host_s_per_call)
        fixed = per_call.get(collective, per_call.get("allreduce", 0.0))
        return fixed + self.host_s_per_wire_byte * wire_bytes if per_call else 0.0

    def for_collective(self, collective: str) -> AlphaBeta:
        """This model with `collective`'s alpha as `alpha_s` (itself when it has none)."""
        if collective not in dict(self.collective_alphas):
            return self
        return replace(self, alpha_s=self.alpha_for(collective), collective_alphas=())

    @classmethod
    def from_bandwidth(cls, bandwidth_bps: float, alpha_s: float = 0.0) -> AlphaBeta:
        """Model links of `bandwidth_bps` bits/s (inf means free transfers) and latency alpha."""
        if not bandwidth_bps > 0:
            raise ValueError(f"bandwidth_bps must be > 0, got {bandwidth_bps}")
        return cls(alpha_s=alpha_s, beta_s_per_byte=8.0 / bandwidth_bps)

    def terms(self, collective: str, algorithm: str, nbytes: int, world_size: int) -> Terms:
        """Critical-path message/byte counts of `collective` run with `algorithm`.

        Only the pipelined chain (its segment count is tuned to alpha and beta) and the eager
        binomial broadcast (its slowest path, and `burst_bytes`) depend on the model itself;
        every other count is a function of (n, p) alone.
        """
        _check(collective, algorithm, nbytes, world_size)
        if self.collective_alphas:  # the chain's segments and the eager tree's path use alpha
            return self.for_collective(collective)._terms(collective, algorithm, nbytes, world_size)
        return self._terms(collective, algorithm, nbytes, world_size)

    def _terms(self, collective: str, algorithm: str, nbytes: int, world_size: int) -> Terms:
        n, p = float(nbytes), world_size
        if p == 1:
            return Terms(0.0, 0.0, 0.0)
        rounds = _log2_ceil(p)
        spread = (p - 1) / p * n  # every other rank's share, n/p each
        if collective == "p2p":
            return Terms(1, n, 0)
        if collective == "broadcast":
            if algorithm == "chain":
                return self._chain(n, p)
            if algorithm == "binomial_eager":
                return self._eager_binomial(n, p)
            return Terms(rounds, rounds * n, 0)
        if collective == "reduce":
            return Terms(rounds, rounds * n, rounds * n)
        if collective == "allreduce":
            if algorithm == "ring":
                return Terms(2 * (p - 1), 2 * spread, spread)
            if algorithm == "halving_doubling":
                return _halving_doubling(n, p)
            return Terms(2 * rounds, 2 * rounds * n, rounds * n)  # tree: reduce + broadcast
        if collective in ("gather", "scatter"):
            return Terms(rounds, spread, 0)  # binomial: the root's link carries p-1 blocks
        if collective == "allgather":
            return Terms(p - 1 if algorithm == "ring" else rounds, spread, 0)
        if collective == "reduce_scatter":
            return Terms(p - 1, spread, spread)
        return Terms(p - 1, spread, 0)  # all_to_all pairwise: p-1 exchanges of n/p

    def _eager_binomial(self, n: float, p: int) -> Terms:
        return _slowest_eager_path(self, n, p)

    def _path_terms(self, copies: tuple[int, ...], n: float) -> Terms:
        """One path of the eager binomial tree; a forwarding hop's first `burst_bytes` pass
        at once."""
        forwarded = sum(max(0.0, k * n - self.burst_bytes) for k in copies[1:])
        return Terms(len(copies), copies[0] * n + forwarded, 0)

    def _chain(self, n: float, p: int) -> Terms:
        # n split into k segments flows down a chain of p ranks: p - 2 + k steps of n/k each.
        # The optimum k* = sqrt((p-2) n beta / alpha); integer k in [1, max(n, 1)].
        def steps(k: int) -> Terms:
            return Terms(p - 2 + k, (p - 2 + k) * n / k, 0)

        if self.alpha_s == 0:
            k_best = max(1, int(n))
        else:
            k_star = math.sqrt((p - 2) * n * self.beta_s_per_byte / self.alpha_s)
            k_lo = min(max(1, math.floor(k_star)), max(1, int(n)))
            k_best = min((k_lo, min(k_lo + 1, max(1, int(n)))), key=lambda k: self._cost(steps(k)))
        return steps(k_best)

    def _cost(self, t: Terms) -> float:
        latency, transfer = self.alpha_s * t.messages, self.beta_s_per_byte * t.wire_bytes
        if self.overlap:
            link = max(latency + self.cpu_s_per_byte * t.wire_bytes, transfer)
        else:
            link = latency + transfer
        return link + self.gamma_s_per_byte * t.reduce_bytes

    def time(self, collective: str, algorithm: str, nbytes: int, world_size: int) -> float:
        """Predicted seconds for `collective` over `nbytes` on `world_size` ranks.

        Collectives and algorithms are listed in `ALGORITHMS`; anything else is a ValueError.
        """
        model = self.for_collective(collective)
        if collective == "allreduce" and self.allreduce_alphas:
            model = replace(model, alpha_s=self.alpha_for(collective, nbytes))
        return model._cost(model.terms(collective, algorithm, nbytes, world_size))


@functools.lru_cache(maxsize=4096)  # the same buffers and chunks recur in every iteration
def _slowest_eager_path(model: AlphaBeta, n: float, p: int) -> Terms:
    """The slowest path of `model`'s eager binomial broadcast of `n` bytes to `p` ranks (the
    first of equals): a pure function of the (frozen) model, n and p, so cached."""
    return max((model._path_terms(c, n) for c in _eager_binomial_paths(p)), key=model._cost)


def _interpolate_log(points: tuple[tuple[float, float], ...], nbytes: float) -> float:
    """The value at `nbytes` on the line through (log size, value) `points`, sorted by size;
    the nearest end's value outside them."""
    if nbytes <= points[0][0]:
        return points[0][1]
    for (n0, a0), (n1, a1) in zip(points, points[1:], strict=False):
        if nbytes <= n1:
            share = math.log(nbytes / n0) / math.log(n1 / n0)
            return a0 + share * (a1 - a0)
    return points[-1][1]
