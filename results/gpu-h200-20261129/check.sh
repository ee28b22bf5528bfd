#!/usr/bin/env bash
# One lent H200, one call (2026-11-29). Part 1: one worker, one GPU, three rounds at batch 256
# (the earlier checks ran batch 32, where these small models' steps are mostly kernel launches
# and moved 1.4x between rounds): in each round, for each model, `cadence profile` on the GPU
# and then `cadence train` of the same model for 200 steps right after, so each prediction
# (`cadence simulate --workers 1` on the profile, run afterwards on the development machine)
# has a training run next to its profile. Part 2: ZeRO on a GPU over NCCL (never run before),
# one worker: DDP, ZeRO stages 1-3 without compression and stage 2 with 1-bit Adam, mlp, Adam,
# same seed. Part 3: the CUDA tests. Run on the GPU machine from the repository root with
# pyzmq's wheel in .whl/ (`pip download pyzmq==27.3.0 --only-binary=:all: --python-version 3.12
# --platform manylinux_2_28_x86_64 --no-deps -d .whl`); writes $OUT/log.txt and $OUT/files.tgz.
# As run (21:39 UTC, timeout 570 s), the rounds took 550 s and the call ended as part 2 began,
# before the tar: a second call on the still-warm machine packed /tmp/res, and zero/zero.sh
# ran part 2 (part 3, the tests, did not run: the 15 minutes of device time were spent).
export PYTHONUNBUFFERED=1
LOG=$OUT/log.txt
RES=/tmp/res
mkdir -p $RES
{
date -u; nvidia-smi -L
python3 -c "import torch,sys;print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name(0))"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src
REPO=$PWD
cd /tmp
for r in 1 2 3; do
  for m in vgg16 cnn_lstm resnet32 gpt_mini; do
    echo "=== round $r $m $(date -u +%T)"
    timeout 100 python3 -m cadence profile --model $m --batch-size 256 --device cuda --json $RES/prof-$m-r$r.json | tail -4
    timeout 100 python3 -m cadence train --model $m --dataset synthetic --workers 1 --device cuda --batch-size 256 --steps 200 --name $m-r$r --out /tmp/runs --json $RES/train-$m-r$r.json 2>&1 | grep "^done"
    nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
  done
done
echo "=== zero over NCCL, one worker $(date -u +%T)"
Z="--model mlp --workers 1 --device auto --optimizer adam --lr 0.001 --steps 60 --seed 3 --out /tmp/runs"
run() { name=$1; shift; timeout 100 python3 -m cadence train $Z --name $name --json $RES/zero-$name.json "$@" 2>&1 | grep -E "^(cadence|done|epoch)|Error|error" | tail -3; }
run ddp --strategy ddp
for s in 1 2 3; do run zero$s-none --strategy zero --zero-stage $s; done
run zero2-onebit --strategy zero --zero-stage 2 --compression onebit --freeze-steps 20
tar -C $RES -czf $OUT/files.tgz .
echo "=== tests $(date -u +%T)"
cd $REPO
timeout 170 python3 -m pytest -q -p no:cacheprovider -ra tests/dist/test_cuda.py tests/unit/test_profile.py tests/unit/test_profile_in_loop.py tests/unit/test_sim_input.py 2>&1 | tail -8
date -u
} > $LOG 2>&1
tail -c 11000 $LOG
