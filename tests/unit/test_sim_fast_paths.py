"""The simulator's fast paths give the answers of the straightforward ones: a saved profile's
model facts against building the model, one simulated worker against every worker, cached
collective costs against computing them afresh; and a prediction from a saved profile runs
without importing torch."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from cadence.cli import main
from cadence.comm.cost import AlphaBeta, _eager_binomial_paths
from cadence.errors import UserError
from cadence.models import get_model_spec, model_names
from cadence.profile import Profile, profile_command
from cadence.profile.facts import zoo_facts
from cadence.sim.command import make_setup, run_strategy
from cadence.sim.options import SimOptions

MODEL = "cnn_lstm"  # BatchNorm buffers of two dtypes, and an LSTM whose gradients arrive
# out of registration order: every fact the profile records is not the trivial one

PREDICTIONS = [
    ["simulate", "--strategy", "ddp"],
    ["simulate", "--strategy", "cadence-dp"],
    ["simulate", "--strategy", "zero", "--zero-stage", "1", "--compression", "fp16"],
    ["simulate", "--strategy", "zero", "--zero-stage", "3", "--compression", "onebit"],
    ["plan", "dp", "--thresholds", "16kib,256kib"],
    ["plan", "strategies"],
]


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The same profile saved with the model facts `cadence profile` records, and without."""
    profile = profile_command(MODEL, batch_size=4, iterations=1, warmup=0, echo=lambda _: None)
    folder = tmp_path_factory.mktemp("profiles")
    recorded, plain = folder / "recorded.json", folder / "plain.json"
    profile.save(recorded)
    replace(profile, model_facts=None).save(plain)
    return recorded, plain


def test_the_profile_records_what_building_the_model_finds(profiles: tuple[Path, Path]) -> None:
    recorded, plain = (Profile.load(p) for p in profiles)
    assert recorded.model_facts == zoo_facts(MODEL)
    assert recorded.model_facts is not None
    assert recorded.model_facts.buffer_broadcasts == 2
    assert Profile.load(profiles[1]).model_facts is None
    assert replace(recorded, model_facts=None) == plain


def test_a_profile_with_broken_facts_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    facts = zoo_facts("cnn")
    bad = replace(facts, arrival_order=facts.arrival_order[1:])
    profile = Profile(
        "cnn", 4, (1, 8, 8), (), 1.0, 0.0, 1, 0, "cpu", 1, "x", 0, "cpu_accounted",
        model_facts=bad,
    )  # fmt: skip
    profile.save(path)
    with pytest.raises(UserError, match="arrival_order must name every parameter once"):
        Profile.load(path)


@pytest.mark.parametrize("command", PREDICTIONS, ids=lambda c: "-".join(c[:4]))
@pytest.mark.parametrize("workers", ["4", "1024"])
def test_predictions_from_recorded_facts_equal_those_from_building_the_model(
    profiles: tuple[Path, Path], tmp_path: Path, command: list[str], workers: str,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    outputs = []
    for path in profiles:
        out = tmp_path / f"{path.stem}.json"
        args = ["--model", MODEL, "--workers", workers, "--bandwidth", "1gbit"]
        assert main([*command, *args, "--profile", str(path), "--json", str(out)]) == 0
        printed = capsys.readouterr().out.splitlines()
        # simulate's "assumed:" line names the profile's file, which differs here
        outputs.append((out.read_text(), [x for x in printed if not x.startswith("assumed: ")]))
    assert outputs[0] == outputs[1]


TORCH_PROBE = """
import sys
from cadence.cli import main
code = main({argv!r})
print("torch" in sys.modules, code)
"""


def _runs_without_torch(argv: list[str]) -> str:
    """Run `cadence ARGV` in a fresh interpreter; check it succeeds without importing torch
    and return what it printed."""
    proc = subprocess.run(
        [sys.executable, "-c", TORCH_PROBE.format(argv=argv)], capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    loaded, code = proc.stdout.split()[-2:]
    assert code == "0", proc.stderr
    assert loaded == "False", proc.stderr
    return proc.stdout


@pytest.mark.parametrize("command", PREDICTIONS, ids=lambda c: "-".join(c[:4]))
def test_a_prediction_from_a_saved_profile_does_not_import_torch(
    profiles: tuple[Path, Path], command: list[str]
) -> None:
    argv = [*command, "--model", MODEL, "--workers", "64", "--profile", str(profiles[0])]
    _runs_without_torch(argv)


def test_a_prediction_on_a_calibrated_link_does_not_import_torch(
    profiles: tuple[Path, Path],
) -> None:
    # The saved calibration is read by `cadence.comm.calibration`, free of torch.
    calibration = Path(__file__).parents[2] / "benchmarks/baselines"
    calibration /= "bench-sim-rankings.150mbit.2w.calibration.json"
    argv = ["simulate", "--strategy", "zero", "--model", MODEL, "--workers", "64",
            "--profile", str(profiles[0]), "--calibration", str(calibration)]  # fmt: skip
    assert "calibrated link" in _runs_without_torch(argv)


def test_the_zoo_transformers_are_its_next_token_models() -> None:
    # plan strategies tries tensor parallelism only for next-token models, without building
    # the others: pin that no other zoo model is one tensor parallelism could split.
    from cadence.tp.transformer import gpt_parts

    for name in model_names():
        spec = get_model_spec(name)
        try:
            gpt_parts(spec.build())
            splits = True
        except UserError:
            splits = False
        assert splits == (spec.task == "next_token"), name


@pytest.mark.parametrize("workers", [2, 4, 8])
@pytest.mark.parametrize(
    "strategy, threshold", [("ddp", 0), ("cadence-dp", None), ("cadence-dp", 16 << 10)]
)
def test_one_simulated_worker_predicts_what_all_of_them_do(
    profiles: tuple[Path, Path], workers: int, strategy: str, threshold: int | None
) -> None:
    setup = make_setup(
        model=MODEL, workers=workers, bandwidth="1gbit", latency_s=20e-6,
        profile_path=str(profiles[0]), echo=lambda _: None,
    )  # fmt: skip
    results = [
        run_strategy(setup, strategy, threshold, None, 25 << 20, SimOptions(replicas=n))[0]
        for n in (1, workers)
    ]
    one, every = (r.summary() for r in results)
    one_busy, every_busy = one.pop("busy_s"), every.pop("busy_s")
    assert one == every  # exactly: the same floats, not approximately
    assert {k: every_busy[k] for k in one_busy} == one_busy  # worker 0's own resources
    assert len(every_busy) == workers * len(one_busy)
    assert results[0].peak_memory_bytes == results[1].peak_memory_bytes


def every_rank_path(p: int) -> list[tuple[int, ...]]:
    """Rank v's path from the root of gloo's eager binomial broadcast, for every v > 0, one
    rank at a time: v gets the data from v - 2^h (h its highest set bit), and a sender s
    posts its copies to s + 2^i for every i from s's bit length while that is a rank."""

    def sends(s: int) -> int:
        return sum(1 for i in range(s.bit_length(), (p - 1).bit_length()) if s + (1 << i) < p)

    def path(v: int) -> tuple[int, ...]:
        if v == 0:
            return ()
        parent = v - (1 << (v.bit_length() - 1))
        return (*path(parent), sends(parent))

    return [path(v) for v in range(1, p)]


@pytest.mark.parametrize("p", [1, 2, 3, 4, 7, 8, 64, 100, 1024])
def test_the_broadcast_tree_holds_each_ranks_path_once(p: int) -> None:
    paths = _eager_binomial_paths(p)
    assert set(paths) == set(every_rank_path(p))
    assert len(paths) == len(set(paths))


@pytest.mark.parametrize(
    "link",
    [
        AlphaBeta.from_bandwidth(1e9, alpha_s=30e-6),
        AlphaBeta(alpha_s=50e-6, beta_s_per_byte=8e-9, overlap=True, burst_bytes=64e3),
        AlphaBeta(
            alpha_s=50e-6, beta_s_per_byte=8e-9, overlap=True, cpu_s_per_byte=1e-9,
            collective_alphas=(("broadcast", 80e-6),),
        ),
    ],
)  # fmt: skip
def test_cached_broadcast_costs_are_the_slowest_ranks(link: AlphaBeta) -> None:
    model = link.for_collective("broadcast")
    for p in (2, 5, 64, 1024):
        for n in (0, 1000, 3_000_000):
            first = link.time("broadcast", "binomial_eager", n, p)
            again = link.time("broadcast", "binomial_eager", n, p)
            slowest = max(model._cost(model._path_terms(c, float(n))) for c in every_rank_path(p))
            assert first == again == slowest


def test_the_zero_package_loads_its_names_on_use() -> None:
    import cadence.zero
    from cadence.zero import compress, wire

    assert callable(cadence.zero)  # cadence.zero(model, ...) as before
    assert cadence.zero.zero.__module__ == "cadence.zero.api"
    assert cadence.zero.ZeroConfig.__module__ == "cadence.zero.config"
    assert cadence.zero.build_layout.__module__ == "cadence.zero.layout"
    assert compress.wire_bytes is wire.wire_bytes  # the codec's own names still there
    assert compress.SCALE_CHUNK == wire.SCALE_CHUNK
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = cadence.zero.no_such_name
