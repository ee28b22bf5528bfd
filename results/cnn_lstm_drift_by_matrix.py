"""cnn_lstm's in-run drift in every 20-round matrix (nn-zz): steps per turn, the steps each
variant trained over the run (warm-up round included), and per variant the median of the last
five rounds over the first five. Subnormals appear after about 1000 steps of training on the
synthetic set (`results/subnormals_cnn_lstm.py`); uu-zz flushed them.

    python results/cnn_lstm_drift_by_matrix.py > results/cnn-lstm-drift-by-matrix-20261201.txt
"""

import glob
import json
import statistics as st

MATRICES = ("nn", "oo", "pp", "qq", "rr", "ss", "tt", "uu", "vv", "ww", "xx", "yy", "zz")

for matrix in MATRICES:
    (path,) = glob.glob(f"results/bench-dp-paired-small-20rounds-aligned-2026*{matrix}.json")
    with open(path) as file:
        data = json.load(file)
    for row in data["rows"]:
        if row["model"] != "cnn_lstm":
            continue
        rounds = row["rounds_s"]
        steps = row["block_steps"] * (len(rounds["ddp"]) + 1)
        drift = {name: st.median(t[-5:]) / st.median(t[:5]) for name, t in rounds.items()}
        flushed = row.get("subnormals_flushed", False)
        shown = ", ".join(f"{name} {ratio:.2f}" for name, ratio in drift.items())
        print(f"{matrix} {row['cap']:>7}: {row['block_steps']:3d} steps a turn, ~{steps} a "
              f"variant, subnormals {'flushed' if flushed else 'kept'}; last 5 / first 5: {shown}")
