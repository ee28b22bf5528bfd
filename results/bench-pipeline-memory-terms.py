"""Per-block memory of one forward and one backward on CPU, read from the kernel's peak-RSS
counter (as `cadence bench pipeline` measures), to see what the pipeline memory model misses.

    cd /work/main && flock /tmp/cadence-bench.lock env MALLOC_MMAP_THRESHOLD_=65536 \
      MALLOC_TRIM_THRESHOLD_=65536 PYTHONPATH=src:. /tmp/venv0/bin/python \
      results/bench-pipeline-memory-terms.py > results/bench-pipeline-memory-terms.txt

Per block (micro-batch of 2), three runs (the first with no gradients yet): f = peak during
forward, kept = what the forward leaves alive, b = peak during backward (MiB). Conv blocks
allocate one weight-sized copy in forward (oneDNN repacks the weight) and two in backward (the
new weight gradient plus the repacked weight); linear and transformer blocks only the gradient.
"""
import ctypes, gc, torch
from pathlib import Path
from cadence.models import get_model_spec
torch.set_num_threads(1)
def rss(f):
    for l in Path("/proc/self/status").read_text().splitlines():
        if l.startswith(f+":"): return int(l.split()[1])*1024
def rel():
    gc.collect(); ctypes.CDLL("libc.so.6").malloc_trim(0)
MB=2**20
for name, mb in (("gpt_mini",2),("vgg16",2)):
    spec=get_model_spec(name); model=spec.build(); x,y=spec.synthetic_batch(mb)
    h=x
    for i,blk in enumerate(model):
        P=sum(p.numel()*4 for p in blk.parameters())
        inp=h.detach()
        if inp.is_floating_point(): inp.requires_grad_(True)
        res=[]
        for it in range(3):
            for p in blk.parameters(): 
                if it==0: p.grad=None
            rel(); Path("/proc/self/clear_refs").write_text("5"); b=rss("VmRSS")
            out=blk(inp); f=rss("VmHWM")-b; live=rss("VmRSS")-b
            Path("/proc/self/clear_refs").write_text("5"); b2=rss("VmRSS")
            out.float().sum().backward(); bw=rss("VmHWM")-b2
            res.append("f%.2f/kept%.2f/b%.2f"%(f/MB,live/MB,bw/MB)); del out
            if inp.requires_grad: inp.grad=None
        h=blk(inp).detach()
        print(name,i,type(blk).__name__, "P %.2f"%(P/MB), res)
