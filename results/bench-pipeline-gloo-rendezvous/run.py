# Run from /work/main (see README.txt next to this file).

import sys, tempfile
from pathlib import Path
from cadence.netem import EmulatedCluster, parse_bandwidth, cleanup_on_signals, start_background_load
from cadence.bench._launch import run_workers
loaded = len(sys.argv)>1 and sys.argv[1]=="load"
with cleanup_on_signals(), EmulatedCluster(2, parse_bandwidth("200mbit")) as c, tempfile.TemporaryDirectory() as d:
    load = start_background_load(c,0,1) if loaded else None
    try:
        import time; time.sleep(1.0 if loaded else 0)
        run_workers(c, "rankdiag_worker", [], Path(d), 1, 900.0)
    finally:
        if load: load.stop()
    print((Path(d)/"logs").glob("*"))
    for f in sorted((Path(d)/"logs").glob("*")): print(f, f.read_text()[-3000:])
