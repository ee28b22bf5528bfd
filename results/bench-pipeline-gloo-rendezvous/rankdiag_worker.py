import os, sys, time, json, statistics
import torch, torch.distributed as dist, torch.multiprocessing as mp
from cadence.models import get_model_spec, loss_fn
from cadence.pipeline.api import pipeline
MODEL=os.environ.get("DIAG_MODEL","gpt_mini")
RANGES=((0,3),(3,6)) if MODEL=="gpt_mini" else ((0,9),(9,16))
CANDS=[("gpipe",8),("1f1b",8),("kfkb:2",8),("kfkb:4",8),("kfkb:8",8),("1f1b",4),("gpipe",4)]
R=int(os.environ.get("ROUNDS","15"))
def work(rank):
    torch.set_num_threads(1)
    from cadence.comm import init_from_env
    init_from_env()
    from cadence.pipeline.probe import probe_stage_link
    link=probe_stage_link(0,1)
    if rank==0: print("probe", link, flush=True)
    # message cost as the executor sees it: 64 KiB one way after compute gaps of g ms
    buf=torch.zeros(16384)
    for gap in (0.0,0.005,0.02):
        ts=[]
        for _ in range(10):
            dist.barrier(); time.sleep(gap)
            t=time.perf_counter()
            if rank==0: dist.send(buf,1); dist.recv(torch.zeros(1),1)
            else: dist.recv(buf,0); dist.send(torch.zeros(1),0)
            ts.append(time.perf_counter()-t)
        if rank==0: print(f"64KiB+echo after {gap*1e3:.0f} ms idle: median {statistics.median(ts)*1e3:.2f} ms", flush=True)
    from cadence.pipeline.executor import PipelineExecutor as PE
    stats={}
    orig_recv=PE._receive
    def rec(self,action,links):
        t=time.perf_counter(); key=(action.kind,action.microbatches)
        pre = key in links.recvs
        out=orig_recv(self,action,links); d=time.perf_counter()-t
        st=stats.setdefault((self.schedule.name,self.schedule.num_microbatches),{}); st.setdefault("wait",[]).append((action.kind,action.microbatches[0],round(d*1e3,2),pre))
        return out
    PE._receive=rec
    acc={"f":0.0,"b":0.0}
    of,ob,os_=PE._forward,PE._backward,PE._step
    def fw(self,*a):
        t=time.perf_counter(); r=of(self,*a); acc["f"]+=time.perf_counter()-t; return r
    def bw(self,*a):
        t=time.perf_counter(); r=ob(self,*a); acc["b"]+=time.perf_counter()-t; return r
    steps={}
    def stp(self,*a):
        acc["f"]=acc["b"]=0.0; st=stats.get((self.schedule.name,self.schedule.num_microbatches),{}).get("wait",[]); n0=len(st)
        t=time.perf_counter(); r=os_(self,*a); tot=time.perf_counter()-t
        st=stats.get((self.schedule.name,self.schedule.num_microbatches),{}).get("wait",[])
        w=sum(x[2] for x in st[n0:])
        steps.setdefault(self.schedule.name,[]).append((round(tot*1e3,1),round(acc["f"]*1e3,1),round(acc["b"]*1e3,1),round(w,1)))
        return r
    PE._forward,PE._backward,PE._step=fw,bw,stp
    spec=get_model_spec(MODEL); torch.manual_seed(0); model=spec.build()
    x,y=spec.synthetic_batch(16)
    exs=[pipeline(model, loss_fn, s, m, RANGES, backend="cadence") for s,m in CANDS]
    def step(ex):
        for p in ex.module.parameters(): p.grad=None
        dist.barrier(); t=time.perf_counter(); ex.step(x if ex.is_first else None, y if ex.is_last else None); return time.perf_counter()-t
    for ex in exs: step(ex); step(ex)
    T=[[] for _ in exs]
    for r in range(R):
        order=list(range(len(exs)))
        for i in (order if r%2==0 else order[::-1]): T[i].append(step(exs[i]))
    if True:
        import collections
        for k,v in stats.items():
            last=v["wait"][-len(v["wait"])//(R+2):]
            pass
        for k,v in steps.items(): print("rank",rank,k,"(total, fwd, bwd, recv-wait) ms:",v[2:],flush=True)
    # compute alone vs concurrent: stage fwd+bwd of 8 micro-batches of 2, no messages
    st=exs[0].module
    a,b=RANGES[rank]
    full=model  # input for stage 1: stage-0 output
    with torch.no_grad(): h=model[0:RANGES[0][1]](x)
    src = x if rank==0 else h
    def compute():
        t=time.perf_counter()
        for k in range(8):
            inp=src[2*k:2*k+2]
            if rank==1: inp=inp.detach().requires_grad_(True)
            out=st(inp)
            if rank==1: out=loss_fn(out,y[2*k:2*k+2])
            out.backward(torch.ones_like(out) if rank==0 else None)
        return time.perf_counter()-t
    alone=[[],[]]; conc=[]
    for r in range(R):
        for who in (0,1):
            dist.barrier()
            if rank==who: alone[who].append(compute())
            dist.barrier()
        dist.barrier(); conc.append(compute())
    every=[None,None]; dist.all_gather_object(every,{"T":T,"alone":alone[rank],"conc":conc})
    if rank==0:
        for i,(s,m) in enumerate(CANDS):
            slow=[max(every[0]["T"][i][k],every[1]["T"][i][k]) for k in range(R)]
            q=statistics.quantiles(slow,n=4)
            print(f"{s:8s} M{m}: {statistics.median(slow)*1e3:7.1f} ms ({q[0]*1e3:.0f}-{q[2]*1e3:.0f})")
        for s in (0,1):
            print(f"stage {s} compute 8x2 alone {statistics.median(every[s]['alone'])*1e3:.1f} ms, concurrent {statistics.median(every[s]['conc'])*1e3:.1f} ms")
    dist.destroy_process_group()
if __name__=="__main__":
    work(int(os.environ["RANK"]))
