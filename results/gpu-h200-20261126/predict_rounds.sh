#!/usr/bin/env bash
# One GPU, one worker, three rounds: in each, for each model, profile it on the GPU and then
# train it there (200 steps), so each prediction (`cadence simulate --workers 1` on the
# profile, run afterwards on the development machine) has a training run right after its
# profile. Then the CUDA tests. Run on the GPU machine from the repository root; writes
# $OUT/log.txt and $OUT/files.tgz.
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
for r in 1 2 3; do
  for m in vgg16 resnet32 gpt_mini; do
    echo "=== round $r $m"
    timeout 90 python3 -m cadence profile --model $m --batch-size 32 --device cuda --json $RES/prof-$m-r$r.json | tail -3
    timeout 90 python3 -m cadence train --model $m --dataset synthetic --workers 1 --device cuda --batch-size 32 --steps 200 --name $m-r$r --json $RES/train-$m-r$r.json 2>&1 | grep "^done"
  done
done
tar -C $RES -czf $OUT/files.tgz .
echo "=== tests"
cd $REPO
timeout 150 python3 -m pytest -q -p no:cacheprovider -ra tests/dist/test_cuda.py tests/unit/test_profile.py tests/unit/test_profile_in_loop.py tests/unit/test_sim_input.py 2>&1 | tail -8
date -u
} > $LOG 2>&1
tail -c 11000 $LOG
