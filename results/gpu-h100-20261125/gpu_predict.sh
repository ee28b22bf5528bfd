#!/usr/bin/env bash
# One GPU, one worker: profile each model on the GPU, then train it there, so that
# `cadence simulate --workers 1` on the profile can be set against the trained iteration.
export PYTHONUNBUFFERED=1
LOG=$OUT/log.txt
{
date -u; nvidia-smi -L
python3 -c "import torch,sys;print(sys.version.split()[0], torch.__version__, torch.cuda.device_count(), torch.cuda.get_device_name(0))"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src
cd /tmp
for m in vgg16 resnet32 gpt_mini; do
  echo "=== $m"
  timeout 120 python3 -m cadence profile --model $m --batch-size 32 --device cuda --json $OUT/prof-$m-b32.json | tail -3
  timeout 150 python3 -m cadence train --model $m --dataset synthetic --workers 1 --device cuda --batch-size 32 --steps 300 --name $m --json $OUT/train-$m-b32.json 2>&1 | tail -2
done
} > $LOG 2>&1
tail -c 11500 $LOG
