#!/usr/bin/env bash
# Throwaway: one call's worth of CUDA checks on the lent GPU machine (not committed).
export PYTHONUNBUFFERED=1
LOG=$OUT/log.txt
{
date -u; nvidia-smi -L
python3 -c "import torch,sys;print(sys.version.split()[0], torch.__version__, torch.cuda.device_count(), torch.cuda.get_device_name(0))"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src
echo "=== profiles (cadence profile --device cuda --block-timing T)"
for m in vgg16 resnet32 gpt_mini; do for t in separate in-iteration; do
  echo "--- $m b32 $t"; timeout 120 python3 -m cadence profile --model $m --batch-size 32 --device cuda --block-timing $t --json /tmp/prof-$m-b32-$t.json | tail -2; done; done
for t in separate in-iteration; do echo "--- vgg16 b256 $t"; timeout 120 python3 -m cadence profile --model vgg16 --batch-size 256 --device cuda --block-timing $t --json /tmp/prof-vgg16-b256-$t.json | tail -2; done
cp /tmp/prof-*-in-iteration.json $OUT/
echo "=== tests"
timeout 300 python3 -m pytest -q -p no:cacheprovider -ra tests/dist/test_cuda.py tests/unit/test_profile.py tests/unit/test_placement.py 2>&1 | tail -6
} > $LOG 2>&1
tail -c 11500 $LOG
