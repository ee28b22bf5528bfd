#!/usr/bin/env bash
# One GPU, one worker: profile each model on the GPU (now with the batch's way in and the
# optimizer step timed inside training steps), train it there, and simulate one worker from
# the profile, so the prediction can be set against the trained iteration in the same call.
# Then the loop probe of 2026-11-25 and the CUDA tests. Run on the GPU machine from the
# repository root; writes $OUT/log.txt and $OUT/files.tgz.
export PYTHONUNBUFFERED=1
LOG=$OUT/log.txt
RES=/tmp/res
mkdir -p $RES
{
date -u; nvidia-smi -L
python3 -c "import torch,sys;print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name(0))"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src
REPO=$PWD
cd /tmp
for m in vgg16 resnet32 gpt_mini; do
  echo "=== $m"
  timeout 120 python3 -m cadence profile --model $m --batch-size 32 --device cuda --json $RES/prof-$m-b32.json | tail -4
  timeout 150 python3 -m cadence train --model $m --dataset synthetic --workers 1 --device cuda --batch-size 32 --steps 300 --name $m --json $RES/train-$m-b32.json 2>&1 | grep "^done"
  timeout 60 python3 -m cadence simulate --model $m --workers 1 --bandwidth 100gbit --strategy ddp --profile $RES/prof-$m-b32.json --json $RES/sim-$m-b32.json 2>&1 | grep -E "^predicted|adam step"
done
echo "=== loop probe"
timeout 200 python3 $REPO/results/gpu-h100-20261125/loop_probe.py vgg16 resnet32 gpt_mini
echo "=== tests"
cd $REPO
timeout 300 python3 -m pytest -q -p no:cacheprovider -ra tests/dist/test_cuda.py tests/unit/test_profile.py tests/unit/test_profile_in_loop.py tests/unit/test_sim_input.py tests/unit/test_placement.py 2>&1 | tail -8
date -u
} > $LOG 2>&1
tar -C $RES -czf $OUT/files.tgz .
tail -c 11000 $LOG
