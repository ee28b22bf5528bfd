"""Predicted against trained iteration for one worker on one GPU, from the files beside this.

`python results/gpu-h200-20261129/table.py`: for each (round, model), the profile's figures,
the prediction (`sim-*.json`: `cadence simulate --model M --workers 1 --bandwidth 100gbit
--strategy ddp --profile prof-M-rR.json --json sim-M-rR.json`, run on the development machine)
and the trained iteration's median and quartiles (`train-*.json`, `iteration_times_s`).
Batch 256, made by `check.sh` beside this (log: `check.log`).
"""

import importlib.util
from pathlib import Path

HERE = Path(__file__).parent
_spec = importlib.util.spec_from_file_location("table_1126", HERE.parent / "gpu-h200-20261126/table.py")
assert _spec is not None and _spec.loader is not None
_earlier = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_earlier)

if __name__ == "__main__":
    _earlier.main(HERE / "rounds", ("vgg16", "cnn_lstm", "resnet32", "gpt_mini"))
