"""Predicted against trained iteration for one worker on one GPU, from the files beside this.

`python results/gpu-h200-20261126/table.py`: for each (round, model), the profile's figures,
the prediction (`sim-*.json`: `cadence simulate --model M --workers 1 --bandwidth 100gbit
--strategy ddp --profile prof-M-rR.json --json sim-M-rR.json`, run on the development machine)
and the trained iteration's median and quartiles (`train-*.json`, `iteration_times_s`).
"""

import json
import statistics
from pathlib import Path

HERE = Path(__file__).parent / "rounds"
MODELS = ("vgg16", "resnet32", "gpt_mini")


def main(here: Path = HERE, models: tuple[str, ...] = MODELS) -> None:
    """The table for the rounds in `here` (also used by later checks' table.py)."""

    def load(name: str) -> dict:
        return json.loads((here / name).read_text())

    print(f"{'round':<6}{'model':<10}{'iter ms':>8}{'adam ms':>8}{'batch ms':>9}"
          f"{'predicted':>10}{'trained':>8}{'q25':>7}{'q75':>7}{'pred/trained':>13}")
    ratios: dict[str, list[tuple[float, float]]] = {m: [] for m in models}
    for r in (1, 2, 3):
        for m in models:
            prof, sim = load(f"prof-{m}-r{r}.json"), load(f"sim-{m}-r{r}.json")
            steps = load(f"train-{m}-r{r}.json")["iteration_times_s"]
            q25, median, q75 = statistics.quantiles(steps, n=4)
            predicted = sim["iteration_time_s"]
            ratios[m].append((predicted, median))
            print(f"{r:<6}{m:<10}{prof['iteration_s'] * 1e3:>8.2f}"
                  f"{prof['optimizer_step_s']['adam'] * 1e3:>8.2f}{prof['input_s'] * 1e3:>9.3f}"
                  f"{predicted * 1e3:>10.2f}{median * 1e3:>8.2f}{q25 * 1e3:>7.2f}{q75 * 1e3:>7.2f}"
                  f"{predicted / median:>13.2f}")
    for m, pairs in ratios.items():
        predicted = statistics.median(p for p, _ in pairs)
        trained = [t for _, t in pairs]
        print(f"{m}: median prediction {predicted * 1e3:.2f} ms, median trained "
              f"{statistics.median(trained) * 1e3:.2f} ms ({predicted / statistics.median(trained):.2f}); "
              f"trained medians {min(trained) * 1e3:.2f}-{max(trained) * 1e3:.2f} ms over the rounds "
              f"({max(trained) / min(trained):.2f}x)")
    errors = [abs(p / t - 1) for pairs in ratios.values() for p, t in pairs]
    print(f"all {len(errors)} rows: mean |error| {statistics.mean(errors) * 100:.1f}%, "
          f"worst {max(errors) * 100:.1f}%, {sum(e <= 0.10 for e in errors)} within 10%")


if __name__ == "__main__":
    main()
