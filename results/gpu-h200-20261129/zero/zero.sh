# The second call on the lent H200 (2026-11-29 21:49 UTC, the machine still warm from check.sh,
# whose own ZeRO part never started: its rounds had used the call's 570 s). Run from the
# repository root with pyzmq's wheel in .whl/.
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src; python3 -c "import zmq" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl; R=$OUT; Z="--model mlp --workers 1 --device auto --optimizer adam --lr 0.001 --steps 60 --seed 3 --out /tmp/runs"; run() { n=$1; shift; echo "== $n $(date -u +%T)"; timeout 40 python3 -m cadence train $Z --name $n --json $R/zero-$n.json "$@" 2>&1 | grep -E "^(cadence|done)|rror" | tail -3; }; run ddp --strategy ddp; for s in 1 2 3; do run zero$s-none --strategy zero --zero-stage $s; done; run zero2-onebit --strategy zero --zero-stage 2 --compression onebit --freeze-steps 20; date -u +%T
# A third call printed the tail of /tmp/runs/zero2-onebit/logs/rank0.log (zero.log).
