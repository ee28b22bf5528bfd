# Sourced by results/*_compare.sh: the profiles, the sets of charges the README's simulator
# figures were made with, and one line of `cadence bench sim` scores over every matrix.
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

# every_check "RUNS" FLAGS...: the scores, with FLAGS, of the long matrices RUNS (their file
# suffixes; "a" for the first, which has none), both in-turns matrices and long vgg16.
every_check() {
    local runs=$1 line="" s
    shift
    for s in $runs; do
        [ "$s" = a ] && s=""
        line="$line $(score --from-bench-dp "results/bench-dp-small-long-probe-20261126$s.json" $P4 "$@")"
    done
    for s in "" b; do
        line="$line | $(score --from-bench-dp "results/bench-dp-paired-small-defaults-20261126$s.json" \
            "results/bench-dp-paired-vgg16-400mbit-defaults-20261126$s.json" $P4 "$@")"
    done
    line="$line | $(score --from-bench-dp results/bench-dp-vgg16-long-defaults-20261126.json $P4 "$@")"
    echo "$line"
}
