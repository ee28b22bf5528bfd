"""Alpha-beta collective costs against hand-computed values."""

import math

import pytest

from cadence.comm.cost import ALGORITHMS, AlphaBeta, ring_allreduce_wire_s

A, B, G = 1e-5, 1e-9, 1e-10
N = 1 << 20
MODEL = AlphaBeta(A, B, G)


def close(x, y):
    return math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-18)


@pytest.mark.parametrize("collective", sorted(ALGORITHMS))
def test_single_rank_costs_nothing(collective):
    for algorithm in ALGORITHMS[collective]:
        assert MODEL.time(collective, algorithm, N, 1) == 0.0


@pytest.mark.parametrize("p", [2, 3, 4, 7, 8, 16])
def test_ring_allreduce(p):
    expected = 2 * (p - 1) * A + 2 * (p - 1) / p * N * B + (p - 1) / p * N * G
    assert close(MODEL.time("allreduce", "ring", N, p), expected)


def test_halving_doubling_power_of_two():
    # p = 8: 2 log2 8 = 6 messages, 2 * 7/8 n on the wire, 7/8 n reduced.
    expected = 6 * A + 2 * 7 / 8 * N * B + 7 / 8 * N * G
    assert close(MODEL.time("allreduce", "halving_doubling", N, 8), expected)


def test_halving_doubling_non_power_of_two_adds_fold_step():
    # p = 6 runs on 4 ranks after folding 2 extras in: 4 + 2 messages, 2*3/4 n + 2 n on the wire.
    expected = 6 * A + (1.5 * N + 2 * N) * B + (0.75 * N + N) * G
    assert close(MODEL.time("allreduce", "halving_doubling", N, 6), expected)


@pytest.mark.parametrize("p, rounds", [(2, 1), (3, 2), (4, 2), (5, 3), (8, 3), (9, 4)])
def test_tree_rounds_use_ceil_log2(p, rounds):
    assert close(MODEL.time("broadcast", "binomial", N, p), rounds * (A + N * B))
    assert close(MODEL.time("reduce", "binomial", N, p), rounds * (A + N * B + N * G))
    assert close(MODEL.time("allreduce", "tree", N, p), 2 * rounds * (A + N * B) + rounds * N * G)
    spread = (p - 1) / p * N * B
    assert close(MODEL.time("gather", "binomial", N, p), rounds * A + spread)
    assert close(MODEL.time("scatter", "binomial", N, p), rounds * A + spread)
    assert close(MODEL.time("allgather", "bruck", N, p), rounds * A + spread)


@pytest.mark.parametrize(
    "p, hops, copies", [(2, 1, 1), (3, 1, 2), (4, 2, 3), (8, 3, 6), (16, 4, 10)]
)
def test_eager_binomial_broadcast_shares_each_senders_uplink(p, hops, copies):
    # gloo posts a rank's sends together: on 4 ranks the root's two copies share its uplink
    # (both land at 2 n beta) and rank 1 then forwards to rank 3 (3 n beta in all). p = 2^d:
    # d + (d - 1) + ... + 1 copies along the path 0 -> 1 -> 3 -> 7 ...
    assert close(MODEL.time("broadcast", "binomial_eager", N, p), hops * A + copies * N * B)


def test_forwarding_hops_of_the_eager_broadcast_burst_from_the_bucket():
    # A tbf link that idled until its copy arrived forwards its first `burst_bytes` at once;
    # the root's hop starts on a busy link and pays every byte.
    a, b, n = 1e-4, 1e-8, 1 << 20
    bucket = AlphaBeta(a, b, overlap=True, burst_bytes=n)
    plain = AlphaBeta(a, b, overlap=True)
    assert close(plain.time("broadcast", "binomial_eager", n, 4), 3 * n * b)
    assert close(bucket.time("broadcast", "binomial_eager", n, 4), 2 * n * b)  # rank 1 -> 3 free
    small = AlphaBeta(a, b, overlap=True, burst_bytes=n // 4)  # bucket under one copy
    assert close(small.time("broadcast", "binomial_eager", n, 4), (2 * n + 3 * n / 4) * b)
    # p = 8, path 0 -> 1 -> 3 -> 7 posts 3, 2 and 1 copies: the forwarders' 3 n lose 2 buckets.
    assert close(small.time("broadcast", "binomial_eager", n, 8), (3 * n + 3 * n - 2 * n / 4) * b)
    # One hop (p = 2) has nothing to forward; latency-bound sizes still pay every hop's alpha.
    assert close(
        bucket.time("broadcast", "binomial_eager", n, 2),
        plain.time("broadcast", "binomial_eager", n, 2),
    )
    assert close(bucket.time("broadcast", "binomial_eager", 64, 4), 2 * a)
    # Other collectives do not use it.
    assert close(bucket.time("allreduce", "ring", n, 4), plain.time("allreduce", "ring", n, 4))


def test_a_serialising_link_has_no_bucket():
    with pytest.raises(ValueError, match="burst_bytes needs overlap=True"):
        AlphaBeta(1e-4, 1e-8, burst_bytes=1024)
    with pytest.raises(ValueError, match="burst_bytes must be finite"):
        AlphaBeta(1e-4, 1e-8, overlap=True, burst_bytes=-1)


def test_processor_time_per_byte_adds_to_latency_where_latency_decides():
    # max(alpha * messages + cpu * wire, beta * wire): a ring all-reduce on 4 ranks has 6
    # messages and 1.5 n on the wire.
    a, b, c = 1e-4, 8e-9, 2e-9
    link = AlphaBeta(a, b, overlap=True, cpu_s_per_byte=c)
    plain = AlphaBeta(a, b, overlap=True)
    small, big = 16384, 1 << 20
    assert close(link.time("allreduce", "ring", small, 4), 6 * a + c * 1.5 * small)
    assert close(plain.time("allreduce", "ring", small, 4), 6 * a)
    # Where the wire decides, the processor time passes while the rank waits for tokens.
    assert close(link.time("allreduce", "ring", big, 4), b * 1.5 * big)
    assert close(link.time("allreduce", "ring", big, 4), plain.time("allreduce", "ring", big, 4))
    with pytest.raises(ValueError, match="cpu_s_per_byte needs overlap=True"):
        AlphaBeta(a, b, cpu_s_per_byte=c)
    with pytest.raises(ValueError, match="cpu_s_per_byte must be finite"):
        AlphaBeta(a, b, overlap=True, cpu_s_per_byte=-1e-9)


@pytest.mark.parametrize("p", [2, 5])
def test_linear_step_collectives(p):
    spread = (p - 1) / p * N
    assert close(MODEL.time("allgather", "ring", N, p), (p - 1) * A + spread * B)
    assert close(MODEL.time("reduce_scatter", "ring", N, p), (p - 1) * A + spread * (B + G))
    assert close(MODEL.time("all_to_all", "pairwise", N, p), (p - 1) * A + spread * B)
    assert close(MODEL.time("p2p", "direct", N, p), A + N * B)


def test_chain_broadcast_picks_best_segment_count():
    p, n = 6, 10_000
    model = AlphaBeta(1e-5, 1e-8)
    brute = min((p - 2 + k) * (model.alpha_s + n / k * model.beta_s_per_byte) for k in range(1, n))
    assert close(model.time("broadcast", "chain", n, p), brute)
    # Two ranks: a chain is one message, never split (splitting only adds latency).
    assert close(model.time("broadcast", "chain", n, 2), model.alpha_s + n * model.beta_s_per_byte)
    # Pipelining beats the binomial tree for large messages on many ranks.
    big = 64 << 20
    assert model.time("broadcast", "chain", big, 16) < model.time("broadcast", "binomial", big, 16)


def test_halving_doubling_beats_ring_on_latency():
    small = 8
    assert MODEL.time("allreduce", "halving_doubling", small, 64) < MODEL.time(
        "allreduce", "ring", small, 64
    )


def test_from_bandwidth_matches_wire_bound():
    model = AlphaBeta.from_bandwidth(10e9)
    for p in (2, 3, 8):
        assert close(model.time("allreduce", "ring", N, p), ring_allreduce_wire_s(N, p, 10e9))
    assert ring_allreduce_wire_s(N, 1, 10e9) == 0.0
    assert ring_allreduce_wire_s(N, 4, math.inf) == 0.0
    assert AlphaBeta.from_bandwidth(math.inf).time("allreduce", "ring", N, 4) == 0.0


def test_unknown_names_list_accepted_ones():
    with pytest.raises(ValueError, match="accepted: .*allreduce"):
        MODEL.time("allreduse", "ring", N, 2)
    with pytest.raises(ValueError, match="accepted: ring, halving_doubling, tree"):
        MODEL.time("allreduce", "bcube", N, 2)


def test_rejects_bad_parameters():
    with pytest.raises(ValueError):
        AlphaBeta(-1.0, 1e-9)
    with pytest.raises(ValueError):
        AlphaBeta(0.0, math.nan)
    with pytest.raises(ValueError):
        MODEL.time("allreduce", "ring", -1, 2)


@pytest.mark.parametrize("collective", ["allreduce", "allgather", "broadcast"])
def test_token_bucket_link_pays_the_larger_of_latency_and_bytes(collective):
    algorithm = ALGORITHMS[collective][0]
    serial = AlphaBeta(2e-4, 2e-8, 1e-9)
    bucket = AlphaBeta(2e-4, 2e-8, 1e-9, overlap=True)
    for nbytes in (1024, 16 << 10, 1 << 20, 64 << 20):
        t = serial.terms(collective, algorithm, nbytes, 4)
        latency, transfer, reduction = 2e-4 * t.messages, 2e-8 * t.wire_bytes, 1e-9 * t.reduce_bytes
        assert math.isclose(serial.time(collective, algorithm, nbytes, 4),
                            latency + transfer + reduction)  # fmt: skip
        assert math.isclose(bucket.time(collective, algorithm, nbytes, 4),
                            max(latency, transfer) + reduction)  # fmt: skip


def test_a_collective_alpha_prices_only_that_collectives_messages():
    own = AlphaBeta(A, B, G, collective_alphas=(("allgather", 3 * A),))
    t = own.terms("allgather", "ring", N, 4)
    assert close(own.time("allgather", "ring", N, 4), 3 * A * t.messages + B * t.wire_bytes)
    assert own.alpha_for("allgather") == 3 * A and own.alpha_for("broadcast") == A
    for collective in ("allreduce", "broadcast", "reduce_scatter", "p2p"):
        algorithm = ALGORITHMS[collective][0]
        assert close(own.time(collective, algorithm, N, 4), MODEL.time(collective, algorithm, N, 4))
    assert own.for_collective("allgather") == AlphaBeta(3 * A, B, G)
    assert own.for_collective("allreduce") is own


def test_a_broadcasts_own_alpha_also_sets_its_chain_segments():
    # The chain's segment count is tuned to alpha: its own alpha must tune it.
    base = AlphaBeta(1e-5, 1e-8)
    own = AlphaBeta(1e-5, 1e-8, collective_alphas=(("broadcast", 1e-3),))
    assert own.terms("broadcast", "chain", 10_000, 6) == AlphaBeta(1e-3, 1e-8).terms(
        "broadcast", "chain", 10_000, 6
    )
    assert own.terms("broadcast", "chain", 10_000, 6) != base.terms("broadcast", "chain", 10_000, 6)


def test_collective_alphas_come_back_from_json_lists_and_are_checked():
    # A saved calibration stores the pairs as JSON lists.
    loaded = AlphaBeta(A, B, collective_alphas=[["allgather", 2e-4]])  # type: ignore[arg-type]
    assert loaded == AlphaBeta(A, B, collective_alphas=(("allgather", 2e-4),))
    hash(loaded)
    with pytest.raises(ValueError, match="accepted: .*allgather"):
        AlphaBeta(A, B, collective_alphas=(("all_gather", 2e-4),))
    with pytest.raises(ValueError, match="collective_alphas: allgather"):
        AlphaBeta(A, B, collective_alphas=(("allgather", -1.0),))


def test_p2p_alphas_price_cadences_own_collectives_and_leave_gloos_alone():
    # gloo's all-reduce is priced by size and its all-gather by its own alpha; cadence's ring
    # all-reduce and reduce-scatter have alphas of their own, its all-gather none.
    sized = ((1024.0, 1e-3), (4096.0, 1e-5))
    link = AlphaBeta(A, B, collective_alphas=(("allgather", 2 * A),), allreduce_alphas=sized,
                     p2p_alphas=[["allreduce", 5 * A], ["reduce_scatter", 4 * A]])  # type: ignore[arg-type]  # fmt: skip
    hash(link)
    assert link.alpha_for("allreduce", 1024) == 1e-3  # gloo's calls are not touched
    assert link.alpha_for("reduce_scatter") == A
    own = link.p2p()
    assert own.p2p_alphas == () and own.allreduce_alphas == ()
    assert own.alpha_for("allreduce", 1024) == own.alpha_for("allreduce", 1 << 30) == 5 * A
    assert own.alpha_for("reduce_scatter") == 4 * A
    assert own.alpha_for("allgather") == 2 * A  # no own alpha: priced as gloo's
    t = own.terms("reduce_scatter", "ring", N, 4)
    assert close(own.time("reduce_scatter", "ring", N, 4), 4 * A * t.messages + B * t.wire_bytes)
    # Without an all-reduce of its own, cadence's all-reduce keeps gloo's latency by size.
    gather_only = AlphaBeta(A, B, allreduce_alphas=sized, p2p_alphas=(("allgather", 3 * A),))
    assert gather_only.p2p().allreduce_alphas == sized
    assert MODEL.p2p() is MODEL
    with pytest.raises(ValueError, match="accepted: .*allgather"):
        AlphaBeta(A, B, p2p_alphas=(("ring_all_gather", 2e-4),))


def test_allreduce_alphas_price_each_all_reduce_at_its_own_size():
    sized = AlphaBeta(A, B, allreduce_alphas=((1024, 1e-3), (4096, 1e-5)))
    assert sized.alpha_for("allreduce", 1024) == 1e-3
    assert close(sized.alpha_for("allreduce", 4096), 1e-5)
    # Halfway on a log scale is halfway between the two latencies.
    assert close(sized.alpha_for("allreduce", 2048), (1e-3 + 1e-5) / 2)
    # Outside the measured sizes: the nearest end's.
    assert sized.alpha_for("allreduce", 16) == 1e-3
    assert sized.alpha_for("allreduce", N) == 1e-5
    # Without a size, and for other collectives, the one alpha.
    assert sized.alpha_for("allreduce") == A and sized.alpha_for("broadcast") == A
    t = sized.terms("allreduce", "ring", 2048, 4)
    assert close(
        sized.time("allreduce", "ring", 2048, 4), (1e-3 + 1e-5) / 2 * t.messages + B * t.wire_bytes
    )
    plain = AlphaBeta(A, B)
    assert close(sized.time("allgather", "ring", 2048, 4), plain.time("allgather", "ring", 2048, 4))


def test_allreduce_alphas_come_back_from_json_lists_and_are_checked():
    loaded = AlphaBeta(A, B, allreduce_alphas=[[1024, 1e-3], [4096, 0.0]])  # type: ignore[arg-type]
    assert loaded == AlphaBeta(A, B, allreduce_alphas=((1024.0, 1e-3), (4096.0, 0.0)))
    hash(loaded)
    with pytest.raises(ValueError, match="increasing sizes"):
        AlphaBeta(A, B, allreduce_alphas=((4096, 1e-3), (1024, 1e-3)))
    with pytest.raises(ValueError, match="increasing sizes"):
        AlphaBeta(A, B, allreduce_alphas=((0, 1e-3),))
    with pytest.raises(ValueError, match="alphas >= 0"):
        AlphaBeta(A, B, allreduce_alphas=((1024, -1e-3),))
