#!/usr/bin/env bash
# `cadence bench sim` with all-reduce's latency priced by size or with the calibration's one
# fitted alpha (--calibration-latency), over every separate-run and in-turns matrix the README's
# simulator figures come from, with each set of charges.
# Run from the repository root:
#   bash results/calibration_latency_compare.sh > results/calibration-latency-compare-20261126.txt
set -euo pipefail
P4="--profile results/vgg16-profile-b32-forward.json --profile results/cnn_lstm-profile-b32-forward.json"
P4="$P4 --profile results/resnet32-profile-b32-forward.json --profile results/gpt_mini-profile-b32-forward.json"
EARLIER="--contention results/contention-gpt_mini-400mbit-defaults-20261126.json"
EARLIER="$EARLIER --calibration results/calibration-400mbit-2hosts-20261126.json"
EARLIER="$EARLIER --runtime-cost results/runtime-cost-keep-heap-20261125.json"
FRESH="--costs results/costs-20261126"
FRESH_EARLIER_CALIBRATION="$FRESH --calibration results/calibration-400mbit-2hosts-20261126.json"
FRESH_SMALL_SIZES_CALIBRATION="$FRESH --calibration results/calibration-small-sizes-400mbit-20261126.json"
FRESH_H="--costs results/costs-20261126h"  # measured just before matrix h, after this change
score() {  # mean/worst of one bench sim call
    cadence bench sim "$@" 2>&1 | tail -1 | sed -E 's/mean \|error\| ([0-9.]+)%, worst ([0-9.]+)%.*/\1\/\2/'
}
echo "# mean/worst |error| in %: long matrices a-h | in turns a, b | vgg16 long"
for charges in EARLIER FRESH FRESH_EARLIER_CALIBRATION FRESH_SMALL_SIZES_CALIBRATION FRESH_H; do
    for latency in fitted by-size; do
        line="$charges --calibration-latency $latency:"
        for s in "" b c d e f g h; do
            # shellcheck disable=SC2086
            line="$line $(score --from-bench-dp "results/bench-dp-small-long-probe-20261126$s.json" $P4 ${!charges} --calibration-latency $latency)"
        done
        for s in "" b; do
            # shellcheck disable=SC2086
            line="$line | $(score --from-bench-dp "results/bench-dp-paired-small-defaults-20261126$s.json" \
                "results/bench-dp-paired-vgg16-400mbit-defaults-20261126$s.json" $P4 ${!charges} --calibration-latency $latency)"
        done
        # shellcheck disable=SC2086
        line="$line | $(score --from-bench-dp results/bench-dp-vgg16-long-defaults-20261126.json $P4 ${!charges} --calibration-latency $latency)"
        echo "$line"
    done
done
