#!/usr/bin/env bash
# `cadence bench sim` with and without the emulated links' token bucket (--link-bucket), over
# every matrix the README's simulator figures come from, with each set of charges.
# Run from the repository root: bash results/link_bucket_compare.sh > results/link-bucket-compare-20261126.txt
set -euo pipefail
# shellcheck source=results/_every_check.sh
. results/_every_check.sh
echo "# mean/worst |error| in %: long matrices a-f | in turns a, b | vgg16 long | traced replays 5, 6, 7"
for charges in EARLIER FRESH FRESH_EARLIER_CALIBRATION; do
    for bucket in none tbf; do
        # shellcheck disable=SC2086
        echo "$charges --link-bucket $bucket:$(every_check "a b c d e f" ${!charges} --link-bucket $bucket)"
    done
done
# The traced replays (no charges, as in the README's replay figures).
for n in 5 6 7; do
    replay=$(python3 -c "import json; print(json.load(open('results/sim-replay-timelines-$n.json'))['command'])" \
        | sed 's/^cadence //; s/--json [^ ]*//')
    for bucket in none tbf; do
        # shellcheck disable=SC2086
        echo "traced replay $n --link-bucket $bucket: $(cadence $replay --link-bucket $bucket 2>&1 | tail -1)"
    done
done
