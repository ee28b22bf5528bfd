#!/usr/bin/env bash
# `cadence bench sim` with all-reduce's latency priced by size or with the calibration's one
# fitted alpha (--calibration-latency), over every separate-run and in-turns matrix the README's
# simulator figures come from, with each set of charges.
# Run from the repository root:
#   bash results/calibration_latency_compare.sh > results/calibration-latency-compare-20261126.txt
set -euo pipefail
# shellcheck source=results/_every_check.sh
. results/_every_check.sh
FRESH_SMALL_SIZES_CALIBRATION="$FRESH --calibration results/calibration-small-sizes-400mbit-20261126.json"
FRESH_H="--costs results/costs-20261126h"  # measured just before matrix h, after this change
echo "# mean/worst |error| in %: long matrices a-h | in turns a, b | vgg16 long"
for charges in EARLIER FRESH FRESH_EARLIER_CALIBRATION FRESH_SMALL_SIZES_CALIBRATION FRESH_H; do
    for latency in fitted by-size; do
        # shellcheck disable=SC2086
        echo "$charges --calibration-latency $latency:$(every_check "a b c d e f g h" ${!charges} --calibration-latency $latency)"
    done
done
