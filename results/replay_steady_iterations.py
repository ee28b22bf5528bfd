"""The vgg16 dp-timeline replays at 400mbit, with cadence-dp's first chunked iteration left
out (`cadence.sim.bench_timeline.steady_iterations`), under the simulator as it was before
2026-11-29 (gradients ready at their block's end, collectives sharing the link), with
gradients ready layer by layer (`bench sim --gradients-ready`), and with collectives in issue
order as well (`--collectives`, the default since 7ae85bf).

Traces made from 2026-11-27 to 2026-11-29 06:15 UTC ran cadence-dp's one-chunk probe (four
one-chunk steps, then chunks) but do not record it; their step times, printed first, show it.
Copies of them are given the record (`one_chunk_probe`: 4 iterations, switched to chunks) so
the replay leaves their first chunked iteration out, as it does for traces that record it
(since 0fadaaa, which also trace later steps by default). Traces from before 2026-11-27 ran no
probe and are replayed whole.

Run from the repository root:
    python results/replay_steady_iterations.py > results/replay-steady-iterations-DATE.txt
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path

from cadence.cli import main

NO_PROBE = ["results/dp-timeline-vgg16-400mbit-20261124.json",
            *(f"results/timelines-{i}/vgg16-400mbit.json" for i in (5, 6, 7))]  # fmt: skip
PROBE_UNRECORDED = [f"results/dp-timeline-vgg16-400mbit-{s}.json" for s in
                    ("20261127", "20261128", "20261128b", "20261128z", "20261129a", "20261129b",
                     "20261129c")]  # fmt: skip
PROBE_RECORDED = [f"results/dp-timeline-vgg16-400mbit-20261129{s}.json" for s in "def"]
AFTER_IN_ORDER = [f"results/dp-timeline-vgg16-400mbit-20261129{s}.json" for s in "ghi"]
SETTINGS = {
    "as before 2026-11-29": ("--gradients-ready", "block", "--collectives", "shared"),
    "gradients layer by layer": ("--gradients-ready", "layer", "--collectives", "shared"),
    "layer by layer, collectives in order": ("--gradients-ready", "layer",
                                             "--collectives", "in-order"),
}  # fmt: skip
ARGS = ["--profile", "results/vgg16-profile-b32-forward.json", "--costs", "results/costs-20261126"]


def replay(files: list[str], setting: tuple[str, ...]) -> str:
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        assert main(["bench", "sim", "--from-timeline", *files, *ARGS, *setting]) == 0
    return text.getvalue()


def with_probe(files: list[str], folder: Path) -> list[str]:
    """Copies of `files` with the one-chunk probe their cadence-dp run ran recorded."""
    out = []
    for f in files:
        data = json.loads(Path(f).read_text())
        data["runs"]["cadence"]["one_chunk_probe"] = {"iterations": 4, "one_chunk": False}
        copy = folder / Path(f).name
        copy.write_text(json.dumps(data))
        out.append(str(copy))
    return out


def main_() -> None:
    print("# cadence-dp's step times (s) in each trace; traced window: its starts_s keys")
    for f in NO_PROBE + PROBE_UNRECORDED + PROBE_RECORDED + AFTER_IN_ORDER:
        run = json.loads(Path(f).read_text())["runs"]["cadence"]
        steps = " ".join(f"{t:.2f}" for t in run.get("step_times_s", []))
        print(f"{f}: {steps}; window {sorted(int(i) for i in run.get('starts_s', {}))}")
    with tempfile.TemporaryDirectory() as tmp:
        groups = {
            "no probe (replayed whole)": NO_PROBE,
            "probe ran, not recorded: whole window": PROBE_UNRECORDED,
            "probe ran, not recorded: first chunked iteration left out":
                with_probe(PROBE_UNRECORDED, Path(tmp)),
            "probe recorded, steady window (made after 0fadaaa)": PROBE_RECORDED,
            "probe recorded, steady window (made after 7ae85bf)": AFTER_IN_ORDER,
        }  # fmt: skip
        for label, setting in SETTINGS.items():
            for name, files in groups.items():
                print(f"\n== {name}; {label} ({' '.join(setting)})")
                print(replay(files, setting).rstrip())


if __name__ == "__main__":
    main_()
