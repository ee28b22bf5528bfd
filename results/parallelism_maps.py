"""Draws results/parallelism-map.png, the README's "Which parallelism when" picture, from the
`cadence plan map` outputs made by (saved profiles; the optimizer step is timed at plan time):

    cadence plan map --model gpt_mini --profile results/gpt_mini-profile-b32.json \\
        --json results/plan-map-gpt_mini.json
    cadence plan map --model vgg16 --profile results/vgg16-profile-b32.json \\
        --json results/plan-map-vgg16.json
    cadence plan map --model vgg16 --profile results/vgg16-profile-b32.json \\
        --memory-limit 200mib --json results/plan-map-vgg16-200mib.json
    python results/parallelism_maps.py
"""

import json
from pathlib import Path

from cadence.sim.parallelism_map import draw_map

here = Path(__file__).parent
names = ["plan-map-gpt_mini.json", "plan-map-vgg16.json", "plan-map-vgg16-200mib.json"]
draw_map([json.loads((here / n).read_text()) for n in names], here / "parallelism-map.png")
print(here / "parallelism-map.png")
