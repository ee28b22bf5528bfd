#!/usr/bin/env bash
# The loop probe and `cadence train` side by side on the GPU machine (see loop_probe.py).
export PYTHONUNBUFFERED=1
{
date -u; nvidia-smi -L
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src
timeout 200 python3 results/gpu-h100-20261125/loop_probe.py vgg16 resnet32 gpt_mini
cd /tmp
for m in vgg16 resnet32 gpt_mini; do
  timeout 100 python3 -m cadence train --model $m --dataset synthetic --workers 1 --device cuda --batch-size 32 --steps 300 --name $m 2>&1 | grep "^done"
done
} > $OUT/loop-probe.log 2>&1
cat $OUT/loop-probe.log
