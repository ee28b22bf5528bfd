#!/usr/bin/env bash
# `cadence bench sim` with and without the emulated links' token bucket (--link-bucket), over
# every matrix the README's simulator figures come from, with each set of charges.
# Run from the repository root: bash results/link_bucket_compare.sh > results/link-bucket-compare-20261126.txt
set -euo pipefail
P4="--profile results/vgg16-profile-b32-forward.json --profile results/cnn_lstm-profile-b32-forward.json"
P4="$P4 --profile results/resnet32-profile-b32-forward.json --profile results/gpt_mini-profile-b32-forward.json"
EARLIER="--contention results/contention-gpt_mini-400mbit-defaults-20261126.json"
EARLIER="$EARLIER --calibration results/calibration-400mbit-2hosts-20261126.json"
EARLIER="$EARLIER --runtime-cost results/runtime-cost-keep-heap-20261125.json"
FRESH="--costs results/costs-20261126"
FRESH_EARLIER_CALIBRATION="$FRESH --calibration results/calibration-400mbit-2hosts-20261126.json"
score() {  # mean/worst of one bench sim call
    cadence bench sim "$@" 2>&1 | tail -1 | sed -E 's/mean \|error\| ([0-9.]+)%, worst ([0-9.]+)%.*/\1\/\2/'
}
echo "# mean/worst |error| in %: long matrices a-f | in turns a, b | vgg16 long | traced replays 5, 6, 7"
for charges in EARLIER FRESH FRESH_EARLIER_CALIBRATION; do
    for bucket in none tbf; do
        line="$charges --link-bucket $bucket:"
        for s in "" b c d e f; do
            line="$line $(score --from-bench-dp "results/bench-dp-small-long-probe-20261126$s.json" $P4 ${!charges} --link-bucket $bucket)"
        done
        for s in "" b; do
            line="$line | $(score --from-bench-dp "results/bench-dp-paired-small-defaults-20261126$s.json" \
                "results/bench-dp-paired-vgg16-400mbit-defaults-20261126$s.json" $P4 ${!charges} --link-bucket $bucket)"
        done
        line="$line | $(score --from-bench-dp results/bench-dp-vgg16-long-defaults-20261126.json $P4 ${!charges} --link-bucket $bucket)"
        echo "$line"
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
