"""Per-block profiler: structure, exact parameter bytes, JSON round trip, sanity of times."""

import json
import os

import pytest
import torch

from cadence.errors import UserError
from cadence.models import get_model_spec
from cadence.profile import Profile, profile_command, profile_model, profile_zoo_model
from cadence.profile.in_iteration import block_times_in_iteration
from cadence.zero.codec_cost import CodecCost, profile_codec


@pytest.fixture(scope="module", params=["mlp", "cnn"])
def profiled(request):
    name = request.param
    spec = get_model_spec(name)
    torch.manual_seed(0)
    model = spec.build()
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        # A batch big enough that compute, not Python overhead, dominates the block times.
        profile = profile_model(model, spec.synthetic_batch(128), iterations=7, warmup=2, name=name)
    finally:
        torch.set_num_threads(previous)
    return model, profile


def test_one_entry_per_block(profiled):
    model, profile = profiled
    assert [b.name for b in profile.blocks] == model.block_names()
    assert profile.batch_size == 128 and profile.input_shape == (1, 8, 8)
    assert profile.threads == 1 and profile.peak_memory_kind == "cpu_accounted"
    # The host's cores, so a prediction knows whether training's workers leave one spare.
    assert profile.host_cores == len(os.sched_getaffinity(0))


def test_param_bytes_exact(profiled):
    model, profile = profiled
    assert profile.param_bytes == sum(p.numel() * p.element_size() for p in model.parameters())
    for block, entry in zip(model.blocks(), profile.blocks, strict=True):
        assert entry.param_bytes == sum(p.nbytes for p in block.parameters())


def test_times_and_bytes_are_real(profiled):
    _, profile = profiled
    first, *rest = profile.blocks
    assert first.input_grad_s == 0.0
    assert first.weight_grad_s > 0 and first.forward_s > 0
    for b in rest:
        assert b.forward_s > 0 and b.input_grad_s > 0 and b.weight_grad_s > 0
    for b in profile.blocks:
        assert b.activation_bytes > 0 and b.output_bytes > 0
    assert profile.blocks[-1].output_bytes == 128 * 10 * 4  # logits
    peaks = [b.peak_bytes for b in profile.blocks]
    assert peaks == sorted(peaks) and profile.peak_memory_bytes == peaks[-1]
    assert profile.peak_memory_bytes > 2 * profile.param_bytes  # params + grads + activations
    # The blocks' sum and the whole iteration are timed apart, a few hundred microseconds each
    # for this net, so a neighbouring test's burst can halve either: the check is for units and
    # double counting (off by 10x or more), not for the split's accuracy.
    assert 0.2 <= profile.block_sum_ratio <= 5.0, profile.block_sum_ratio
    # The whole forward is timed inside the whole iteration, the gradients after it.
    assert profile.forward_pass_s is not None
    assert 0 < profile.forward_pass_s < profile.iteration_s


def test_profiles_saved_before_the_forward_pass_was_recorded_still_load(profiled, tmp_path):
    _, profile = profiled
    data = json.loads(profile.to_json())
    del data["forward_pass_s"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    assert Profile.load(path).forward_pass_s is None


def test_json_round_trip(profiled, tmp_path):
    _, profile = profiled
    assert Profile.from_json(profile.to_json()) == profile
    path = tmp_path / "p.json"
    profile.save(path)
    assert Profile.load(path, expected_model=profile.model) == profile


def test_load_rejects_wrong_model_and_bad_files(profiled, tmp_path):
    _, profile = profiled
    path = tmp_path / "p.json"
    profile.save(path)
    with pytest.raises(UserError, match=r"of model '\w+', expected 'vgg16'") as info:
        Profile.load(path, expected_model="vgg16")
    assert "\n" not in str(info.value)
    bad = tmp_path / "bad.json"
    for text in (
        "{oops",
        json.dumps({"format": "other"}),
        json.dumps({"format": "cadence-profile"}),
    ):
        bad.write_text(text)
        with pytest.raises(UserError, match="cannot read profile") as info:
            Profile.load(bad)
        assert "\n" not in str(info.value)
    with pytest.raises(UserError, match="cannot read profile"):
        Profile.load(tmp_path / "missing.json")


def test_tied_parameters_count_once():
    model = get_model_spec("gpt_mini").build(tie_weights=True)
    x, y = get_model_spec("gpt_mini").synthetic_batch(2)
    profile = profile_model(model, (x, y), iterations=1, warmup=0, name="gpt_mini")
    assert profile.param_bytes == sum(p.nbytes for p in model.parameters())
    assert profile.blocks[0].input_grad_s == 0.0  # token ids have no gradient


def test_command_prints_table_and_saves(tmp_path, capsys):
    out = tmp_path / "cnn.json"
    threads = torch.get_num_threads()
    profile = profile_command("cnn", batch_size=4, iterations=1, warmup=0, out=out)
    assert torch.get_num_threads() == threads  # restored
    printed = capsys.readouterr().out
    assert "fwd ms" in printed and "conv1" in printed and "ratio" in printed
    assert Profile.load(out, expected_model="cnn") == profile
    assert profile.threads == 1


def test_the_command_times_with_the_heap_fixed_as_training_processes_run(monkeypatch):
    # A fresh process's dynamic heap faulted Adam's temporaries in on every step (vgg16's step
    # about 2x what the runs timed), so the thresholds
    # are fixed before anything is timed.
    import cadence.profile.command as command

    events: list[str] = []

    def keep_heap() -> bool:
        events.append("heap fixed")
        return True

    monkeypatch.setattr(command, "keep_heap", keep_heap)
    real = command.profile_zoo_model

    def profiled(*args, **kwargs):
        events.append("profiled")
        return real(*args, **kwargs)

    monkeypatch.setattr(command, "profile_zoo_model", profiled)
    profile_command("cnn", batch_size=2, iterations=1, warmup=0, echo=lambda _: None)
    assert events == ["heap fixed", "profiled"]


@pytest.mark.parametrize(
    "kwargs", [{"batch_size": 0, "iterations": 1}, {"batch_size": 2, "iterations": 0}]
)
def test_bad_arguments_are_user_errors(kwargs):
    with pytest.raises(UserError):
        profile_zoo_model("cnn", **kwargs)


def test_unknown_model_is_user_error():
    with pytest.raises(UserError):
        profile_command("nope", batch_size=2, iterations=1, echo=lambda _: None)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", ["cnn", "vgg16"])
def test_profiles_on_cuda_inside_whole_iterations(name):
    def run(timing):
        return profile_command(
            name, batch_size=64, iterations=5, echo=lambda _: None, device="cuda",
            block_timing=timing,
        )

    profile, separate = run("auto"), run("separate")
    assert profile.device.startswith("cuda") and profile.peak_memory_kind == "cuda_max_allocated"
    assert profile.block_timing == "in-iteration" and separate.block_timing == "separate"
    assert all(b.forward_s > 0 and b.weight_grad_s > 0 for b in profile.blocks)
    assert profile.peak_memory_bytes > 2 * profile.param_bytes
    # Timed in calls of their own, vgg16's blocks added up to 1.7-2.0x the iteration on an
    # H100: each call's host overhead is most of a block's time there.
    assert 0.8 <= profile.block_sum_ratio < separate.block_sum_ratio, (
        profile.block_sum_ratio, separate.block_sum_ratio,
    )
    assert profile.block_sum_ratio <= 1.4
    # The loop's own work: the batch's copy to the GPU, the step as the loop pays it.
    assert profile.optimizer_step_timing == "in-loop" and profile.input_s is not None
    assert profile.input_s > 0 and profile.optimizer_step_s is not None
    assert profile.optimizer_step_s["adam"] > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a GPU")
def test_cuda_without_a_gpu_is_user_error():
    with pytest.raises(UserError, match="no CUDA GPU"):
        profile_command("cnn", batch_size=2, iterations=1, echo=lambda _: None, device="cuda")


def test_block_times_inside_one_iteration_split_it():
    spec = get_model_spec("cnn")
    torch.manual_seed(0)
    model = spec.build()
    x, y = spec.synthetic_batch(64)
    cpu = torch.device("cpu")
    block_times_in_iteration(model, x, y, cpu)  # warms up
    # The marks are contiguous: the blocks cover the whole iteration bar the loss. Another
    # test process may share the two cores and preempt a 4 ms iteration at any point; that
    # only ever adds time, so the fastest of several rounds of each is compared.
    marked, whole = [], []
    for _ in range(9):
        forward, backward = block_times_in_iteration(model, x, y, cpu)
        marked.append(sum(forward) + sum(backward))
        whole.append(profile_model(model, (x, y), iterations=1, warmup=0).iteration_s)
    assert len(forward) == len(backward) == len(model.blocks())
    assert all(f > 0 for f in forward) and all(b > 0 for b in backward)
    assert all(p.grad is None for p in model.parameters())  # left cleared
    assert 0.5 < min(marked) / min(whole) < 1.5, (marked, whole)


def test_block_timing_is_recorded_and_checked(profiled, tmp_path):
    _, profile = profiled
    assert profile.block_timing == "in-iteration"  # the default on every device
    for timing in ("separate", "auto"):  # auto: separate calls on the CPU (the pipeline's)
        other = profile_zoo_model("cnn", batch_size=8, iterations=1, block_timing=timing)
        assert other.block_timing == "separate"
    with pytest.raises(UserError, match="unknown block timing 'inside'"):
        profile_zoo_model("cnn", batch_size=8, iterations=1, block_timing="inside")
    path = tmp_path / "p.json"
    path.write_text(profile.to_json().replace('"in-iteration"', '"guessed"'))
    with pytest.raises(UserError, match="block_timing 'guessed'"):
        Profile.load(path)


def test_cli_json_and_out_write_the_same_loadable_profile(tmp_path):
    from cadence.cli import main

    out, js = tmp_path / "out.json", tmp_path / "summary.json"
    args = ["profile", "--model", "cnn", "--micro-batch-size", "4", "--profile-iterations", "1"]
    assert main([*args, "--device", "cpu", "--out", str(out), "--json", str(js)]) == 0
    assert Profile.load(js, expected_model="cnn") == Profile.load(out, expected_model="cnn")


def test_optimizer_steps_are_timed_on_copies_of_the_parameters():
    spec = get_model_spec("mlp")
    torch.manual_seed(0)
    model = spec.build()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    profile = profile_model(model, spec.synthetic_batch(16), iterations=2, warmup=1, name="mlp")
    assert profile.optimizer_step_s is not None
    assert set(profile.optimizer_step_s) == {"sgd", "adam", "adamw"}
    assert all(seconds > 0 for seconds in profile.optimizer_step_s.values())
    for name, value in model.named_parameters():
        torch.testing.assert_close(value, before[name], rtol=0, atol=0)


def test_the_one_bit_codec_is_timed_per_element_and_checked(profiled, tmp_path):
    _, profile = profiled
    codec = profile.codec_s_per_element
    assert codec is not None and set(codec) == {"encode", "decode"}
    # Seconds per element: a few ns on a CPU, far under a microsecond.
    assert all(0 < seconds < 1e-6 for seconds in codec.values()), codec
    assert profile_codec(profile) == CodecCost(codec["encode"], codec["decode"])
    data = json.loads(profile.to_json())
    data["codec_s_per_element"] = {"encode": 1e-9}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    with pytest.raises(UserError, match="codec_s_per_element needs encode and decode"):
        Profile.load(path)
    del data["codec_s_per_element"]  # a profile made before it was recorded
    path.write_text(json.dumps(data))
    older = Profile.load(path)
    assert older.codec_s_per_element is None
    here = profile_codec(older)  # timed on this CPU instead
    assert 0 < here.encode_s_per_element < 1e-6 and 0 < here.decode_s_per_element < 1e-6


def test_a_median_settles_once_its_noise_is_small_enough() -> None:
    from cadence.profile.measure import MIN_SETTLED_ITERATIONS, median_settled

    steady = [1.0, 1.001, 0.999, 1.0005]
    assert not median_settled(steady[: MIN_SETTLED_ITERATIONS - 1], 0.01)
    assert median_settled(steady, 0.01)
    assert not median_settled(steady, 1e-5)
    noisy = [1.0, 1.3, 0.7, 1.2, 0.8]
    assert not median_settled(noisy, 0.01)
    assert median_settled([1.0, 1.0, 1.0, 50.0], 0.01)  # one outlier does not hold it up


def test_profiling_stops_once_the_medians_settle(capsys: pytest.CaptureFixture[str]) -> None:
    from cadence.profile.measure import MIN_SETTLED_ITERATIONS

    spec = get_model_spec("cnn")
    model, batch = spec.build(), spec.synthetic_batch(4)
    loose = profile_model(model, batch, iterations=9, warmup=0, tolerance=10.0, progress=True)
    assert loose.iterations == MIN_SETTLED_ITERATIONS
    assert "profiling custom" in capsys.readouterr().err  # the bar, on stderr
    every = profile_model(model, batch, iterations=4, warmup=0)
    assert every.iterations == 4
    assert "profiling" not in capsys.readouterr().err
    with pytest.raises(ValueError, match="tolerance must be > 0"):
        profile_model(model, batch, iterations=4, warmup=0, tolerance=0.0)
