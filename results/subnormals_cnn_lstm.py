"""Why cnn_lstm's compute drifted within 20-round `dp-paired` runs: subnormal floats.

Trains cnn_lstm alone (one process, one thread, batch 32 = a rank's share of dp-paired's 64,
Adam, the 2048-sample synthetic set it memorises) for STEPS steps and prints, every 200
steps, the median step time, how many subnormal values its parameters, gradients and Adam
state hold, and the loss; at steps 100 and STEPS it profiles 30 steps and prints the LSTM
backward's mean time. `flush` runs it with `torch.set_flush_denormal(True)`.

    taskset -c 0 python results/subnormals_cnn_lstm.py keep 3000 > K.log &
    taskset -c 1 python results/subnormals_cnn_lstm.py flush 3000 > F.log
"""

import statistics
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from cadence.config import TrainConfig
from cadence.models import get_model_spec, load_dataset, loss_fn
from cadence.train.optim import build_optimizer

MODE, STEPS, BATCH = sys.argv[1], int(sys.argv[2]), 32
torch.set_num_threads(1)
torch.set_flush_denormal(MODE == "flush")
torch.manual_seed(0)
spec = get_model_spec("cnn_lstm")
data = load_dataset("synthetic", spec, seed=0)
model = spec.build()
model.train()
optimizer = build_optimizer(model.parameters(), TrainConfig(model="cnn_lstm"))


def step(number: int) -> float:
    start = (number * BATCH) % (len(data.train_x) - BATCH)
    x, y = data.train_x[start : start + BATCH], data.train_y[start : start + BATCH]
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()


def subnormals() -> int:
    count = 0
    for p in model.parameters():
        state = [v for v in optimizer.state[p].values() if torch.is_tensor(v)]
        state = [v for v in state if v.is_floating_point()]
        for t in [p.data, p.grad, *state]:
            a = t.abs()
            count += int(((a > 0) & (a < torch.finfo(t.dtype).tiny)).sum())
    return count


def lstm_backward_ms(first: int) -> float:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for number in range(first, first + 30):
            step(number)
    (event,) = [e for e in prof.key_averages() if e.key == "aten::mkldnn_rnn_layer_backward"]
    return event.self_cpu_time_total / event.count / 1e3


times: list[float] = []
for number in range(STEPS):
    if number == 100:
        print(f"{MODE} step 100: LSTM backward {lstm_backward_ms(100_000):.2f} ms/call", flush=True)
    before = time.perf_counter()
    loss = step(number)
    times.append(time.perf_counter() - before)
    if (number + 1) % 200 == 0:
        median_ms = statistics.median(times[-200:]) * 1e3
        print(f"{MODE} step {number + 1}: median {median_ms:.1f} ms, subnormals "
              f"{subnormals()}, loss {loss:.3f}", flush=True)  # fmt: skip
print(f"{MODE} step {STEPS}: LSTM backward {lstm_backward_ms(STEPS):.2f} ms/call", flush=True)
