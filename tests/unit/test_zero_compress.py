"""1-bit compression, the ZeRO shard layout and its byte/memory formulas, config validation."""

from typing import cast

import pytest
import torch

from cadence.errors import UserError
from cadence.zero import ZeroConfig, build_layout, comm_bytes_per_step, state_bytes
from cadence.zero.compress import (
    SCALE_CHUNK,
    decode,
    decode_add_,
    encode,
    encode_with_feedback,
    pack_signs,
    unpack_signs,
    wire_bytes,
)
from cadence.zero.layout import front_buckets
from cadence.zero.onebit import (
    encode_local_momentum,
    gather_wires,
    mean_of_received,
    momentum_reduce_scatter,
    reduce_received,
)


def test_sign_packing_round_trips_eight_per_byte():
    x = torch.tensor([1.0, -2.0, 0.0, -0.5, 3.0, 3.0, -1.0, -1.0] * 3)
    packed = pack_signs(x)
    assert packed.dtype == torch.uint8 and packed.numel() == 3
    assert packed[0].item() == 0b00110101  # bits 0,2,4,5 set: x >= 0 there
    torch.testing.assert_close(unpack_signs(packed), torch.where(x >= 0, 1.0, -1.0))


def test_encode_is_signs_times_chunk_mean_magnitude_in_one_buffer():
    x = torch.randn(2 * SCALE_CHUNK, generator=torch.Generator().manual_seed(0))
    x[SCALE_CHUNK:] *= 100  # the second chunk gets a scale of its own
    wire, decoded = encode(x)
    assert wire.numel() == wire_bytes(2 * SCALE_CHUNK) == 2 * SCALE_CHUNK // 8 + 2 * 4
    scales = x.view(2, -1).abs().mean(dim=1).repeat_interleave(SCALE_CHUNK)
    expected = torch.where(x >= 0, 1.0, -1.0) * scales
    torch.testing.assert_close(decoded, expected)
    torch.testing.assert_close(decode(wire), expected)


def test_error_feedback_keeps_what_compression_lost():
    gen = torch.Generator().manual_seed(1)
    error = torch.zeros(SCALE_CHUNK)
    total_in, total_out = torch.zeros(SCALE_CHUNK), torch.zeros(SCALE_CHUNK)
    for _ in range(50):
        x = torch.randn(SCALE_CHUNK, generator=gen)
        before = error.clone()
        wire = encode_with_feedback(x, error)
        torch.testing.assert_close(decode(wire) + error, x + before)
        total_in += x
        total_out += decode(wire)
    # What was sent plus what is still owed equals everything fed in: nothing is lost.
    torch.testing.assert_close(total_out + error, total_in, atol=1e-4, rtol=1e-5)


def test_sign_bit_decides_so_negative_zero_decodes_and_feeds_back_exactly():
    x = torch.randn(SCALE_CHUNK, generator=torch.Generator().manual_seed(2))
    x[:4] = torch.tensor([0.0, -0.0, 0.0, -0.0])
    packed = pack_signs(x)
    # +0.0 travels as positive, -0.0 as negative
    assert cast(int, packed[0].item()) & 0b1111 == 0b0101
    wire, decoded = encode(x)
    scale = x.abs().mean()
    torch.testing.assert_close(decoded, torch.copysign(scale.expand_as(x), x), rtol=0, atol=0)
    assert torch.equal(decode(wire), decoded)
    error = -x  # error feedback encodes x + error: all +0.0, whatever x's zeros were
    assert torch.equal(decode(encode_with_feedback(x, error)), scale.new_zeros(x.shape))
    assert torch.equal(error, torch.zeros_like(x))


def test_decode_add_accumulates_the_scaled_decoding():
    x = torch.randn(4 * SCALE_CHUNK, generator=torch.Generator().manual_seed(3))
    wire, decoded = encode(x)
    out = torch.ones_like(x)
    decode_add_(out, wire, alpha=0.25)
    torch.testing.assert_close(out, 1 + 0.25 * decoded)


def _reference_momentum_step(grad, last, err, red_err, beta1, p):
    """The 1-bit all-reduce written out with whole temporaries, as 1-bit Adam defines it."""
    target = beta1 * last + (1 - beta1) * grad + err
    sent = [encode(piece) for piece in target.view(p, -1)]
    new_err = target - torch.cat([d for _, d in sent])
    return sent, new_err


def test_fused_momentum_step_matches_the_written_out_algorithm():
    gen = torch.Generator().manual_seed(4)
    p, piece, beta1 = 2, 2 * SCALE_CHUNK, 0.9
    grad = torch.randn(p * piece, generator=gen)
    last_wire = torch.stack([encode(torch.randn(piece, generator=gen))[0] for _ in range(p)])
    last = torch.cat([decode(w) for w in last_wire])
    err = torch.randn(p * piece, generator=gen) * 0.1
    red_err = torch.randn(piece, generator=gen) * 0.1
    sent_ref, err_ref = _reference_momentum_step(grad, last, err, red_err, beta1, p)
    # Rank 1: its own piece of the last momentum is the fp32 decoding it kept.
    momentum = last.view(p, -1)[1].clone()
    sender_error = err.clone()
    sent = encode_local_momentum(grad, last_wire, momentum, sender_error, beta1, rank=1)
    torch.testing.assert_close(sender_error, err_ref, rtol=1e-6, atol=1e-6)
    for j in range(p):
        torch.testing.assert_close(decode(sent[j]), sent_ref[j][1], rtol=1e-6, atol=1e-6)
    # Reducer: the mean of what arrived plus its error, re-encoded; momentum gets the decoding.
    reducer_error = red_err.clone()
    wire = reduce_received(sent, reducer_error, momentum)
    mean = torch.stack([decode(w) for w in sent]).mean(dim=0)
    _, expected = encode(mean + red_err)
    torch.testing.assert_close(momentum, expected, rtol=1e-6, atol=1e-6)
    assert torch.equal(decode(wire), momentum)
    torch.testing.assert_close(reducer_error, mean + red_err - expected, rtol=1e-5, atol=1e-6)


def test_layout_pads_each_block_to_equal_chunk_aligned_pieces():
    blocks: list[tuple[str, list[tuple[str, tuple[int, ...]]]]] = [
        ("a", [("w", (10, 3)), ("b", (10,))]), ("empty", []), ("c", [("w", (5,))])
    ]
    layout = build_layout(blocks, 4)
    assert [b.name for b in layout.buckets] == ["a", "c"]
    a, c = layout.buckets
    assert (a.numel, a.padded, a.piece) == (40, 4 * SCALE_CHUNK, SCALE_CHUNK)
    assert c.numel == 5 and c.piece == SCALE_CHUNK
    assert [s.offset for s in a.slots] == [0, 30]
    assert a.piece_range(3) == (3 * SCALE_CHUNK, 4 * SCALE_CHUNK)


def test_comm_bytes_formula_by_stage_and_compression():
    k = SCALE_CHUNK
    layout = build_layout([("a", [("w", (2 * k,))]), ("b", [("w", (4 * k,))])], 2)
    fp32 = 4 * (k + 2 * k)  # (p - 1) = 1 piece of every bucket, fp32
    assert comm_bytes_per_step(layout, 1, "none", False) == {
        "gradients": 2 * fp32,
        "parameters": fp32,
        "total": 3 * fp32,
    }
    assert comm_bytes_per_step(layout, 2, "fp16", False)["gradients"] == fp32 // 2
    # Stage 3 gathers every bucket twice except the last, which stays from forward to backward.
    assert comm_bytes_per_step(layout, 3, "none", False)["parameters"] == 4 * (2 * k + 2 * k)
    onebit = (k // 8 + 4) + (2 * k // 8 + 2 * 4)
    # Stage 1: all-to-all + all-gather of the momentum; stages 2-3: the all-to-all only.
    assert comm_bytes_per_step(layout, 1, "onebit", True)["gradients"] == 2 * onebit
    assert comm_bytes_per_step(layout, 2, "onebit", True)["gradients"] == onebit
    assert comm_bytes_per_step(layout, 3, "onebit", True)["gradients"] == onebit
    assert comm_bytes_per_step(layout, 2, "onebit", False)["gradients"] == fp32
    # Replicating the front bucket a (a third of the elements) drops its gather; at stage 2 its
    # momentum is all-gathered as sent (p x p pieces minus its own) instead of all-to-all'd.
    for share in (0.34, 0.5):
        part = comm_bytes_per_step(layout, 2, "onebit", True, replicated_share=share)
        assert part["parameters"] == 4 * 2 * k
        assert part["gradients"] == 2 * (k // 8 + 4) + (2 * k // 8 + 2 * 4)
    assert comm_bytes_per_step(layout, 1, "onebit", True, replicated_share=1)["parameters"] == 0
    # Before the switch-over (fp32 Adam) everything is gathered whatever the share.
    assert comm_bytes_per_step(layout, 1, "onebit", False, replicated_share=1) == (
        comm_bytes_per_step(layout, 1, "onebit", False)
    )


def test_front_buckets_take_whole_blocks_from_the_front_within_the_share():
    k = SCALE_CHUNK
    layout = build_layout([("a", [("w", (k,))]), ("b", [("w", (2 * k,))]), ("c", [("w", (k,))])], 1)
    assert front_buckets(layout, 0) == [False, False, False]
    assert front_buckets(layout, 0.2) == [False, False, False]  # a is a quarter: over 0.2
    assert front_buckets(layout, 0.25) == [True, False, False]
    assert front_buckets(layout, 0.7) == [True, False, False]  # a + b would be 0.75
    assert front_buckets(layout, 0.75) == [True, True, False]
    assert front_buckets(layout, 1) == [True, True, True]


def test_state_bytes_fall_as_one_over_n():
    layout = build_layout([("a", [("w", (4 * SCALE_CHUNK,))])], 4)
    s1, s2, s3 = (sum(state_bytes(layout, s, "adam").values()) for s in (1, 2, 3))
    n = 4 * 4 * SCALE_CHUNK
    assert (s1, s2, s3) == (n + n + 2 * n // 4, n + n // 4 + 2 * n // 4, 4 * n // 4)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"stage": 4}, "stage must be 1, 2 or 3"),
        ({"compression": "twobit"}, "unknown compression 'twobit'"),
        ({"optimizer": "lamb"}, "unknown ZeRO optimizer 'lamb'"),
        ({"compression": "onebit", "optimizer": "sgd"}, "needs optimizer adam"),
        ({"compression": "onebit", "freeze_steps": 0}, "at least 1"),
        ({"gather_dtype": "fp8"}, "unknown gather dtype"),
    ],
)
def test_bad_zero_config_is_a_user_error(kwargs, needle):
    with pytest.raises(UserError, match=needle):
        ZeroConfig(**kwargs)


def test_momentum_reduce_scatter_is_the_momentum_recursion_plus_the_error_change():
    # Stages 2-3 at p = 2, both ranks' sides by hand: rank i sends piece j of
    # beta1 * (what it sent last) + (1 - beta1) g_i + e_i; owner j's momentum is the mean of
    # what it received: beta1 * (its last momentum) + (1 - beta1) * mean g + mean(e - e').
    gen = torch.Generator().manual_seed(5)
    p, piece, beta1 = 2, 2 * SCALE_CHUNK, 0.9
    grads = [torch.randn(p * piece, generator=gen) for _ in range(p)]
    errors = [torch.randn(p * piece, generator=gen) * 0.1 for _ in range(p)]
    last_sent = [
        torch.stack([encode(torch.randn(piece, generator=gen))[0] for _ in range(p)])
        for _ in range(p)
    ]
    last_momentum = [
        torch.stack([decode(last_sent[i][j]) for i in range(p)]).mean(dim=0) for j in range(p)
    ]
    targets = [
        beta1 * torch.cat([decode(w) for w in last_sent[i]]) + (1 - beta1) * grads[i] + errors[i]
        for i in range(p)
    ]
    old_errors = [e.clone() for e in errors]
    sent = []
    for i in range(p):  # each rank alone (world size 1 would send to itself): the sender side
        sent.append(_sender_side(grads[i], last_sent[i], errors[i], beta1))
        decoded = torch.cat([decode(w) for w in sent[i]])
        torch.testing.assert_close(decoded + errors[i], targets[i], rtol=1e-5, atol=1e-6)
    for j in range(p):
        received = torch.stack([sent[i][j] for i in range(p)])
        momentum = torch.stack([decode(w) for w in received]).mean(dim=0)
        mean_grad = torch.stack([g.view(p, -1)[j] for g in grads]).mean(dim=0)
        pairs = zip(old_errors, errors, strict=True)
        error_change = torch.stack([old.view(p, -1)[j] - new.view(p, -1)[j] for old, new in pairs])
        error_change = error_change.mean(dim=0)
        expected = beta1 * last_momentum[j] + (1 - beta1) * mean_grad + error_change
        torch.testing.assert_close(momentum, expected, rtol=1e-5, atol=1e-5)


def _sender_side(grad, last_sent, error, beta1):
    """What `momentum_reduce_scatter` sends, taken from a world-size-1 call per piece."""
    p = last_sent.shape[0]
    sent = []
    for j in range(p):
        piece_error = error.view(p, -1)[j]
        momentum = torch.empty(piece_error.numel())
        out = momentum_reduce_scatter(
            grad.view(p, -1)[j], last_sent[j : j + 1], momentum, piece_error, beta1, None
        )
        sent.append(out[0])
        torch.testing.assert_close(momentum, decode(out[0]))  # alone: the mean is itself
    return torch.stack(sent)


def test_one_bit_exchanges_keep_to_their_tensors_device():
    # On a GPU, buffers made on the CPU failed the first 1-bit step ("found at least two
    # devices, cuda:0 and cpu"); the meta device stands in for any device that is not the CPU.
    meta, p, piece = torch.device("meta"), 2, 2 * SCALE_CHUNK
    grad = torch.empty(p * piece, device=meta)
    wires = torch.empty(p, wire_bytes(piece), dtype=torch.uint8, device=meta)
    momentum, sender_error = torch.empty(piece, device=meta), torch.empty(p * piece, device=meta)
    sent = encode_local_momentum(grad, wires, momentum, sender_error, 0.9, rank=0)
    wire = reduce_received(sent, torch.empty(piece, device=meta), momentum)
    one = [torch.empty(piece, device=meta) for _ in range(3)]  # a world of one: the whole piece
    stage2_sent = momentum_reduce_scatter(one[0], wires[:1], one[1], one[2], 0.9, group=None)
    gathered = gather_wires(wire, 1, group=None)
    out = mean_of_received(torch.empty(piece, device=meta), wires)
    for tensor in (sent, wire, stage2_sent, gathered, out):
        assert tensor.device == meta
