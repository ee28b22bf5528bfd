"""Run by tests/unit/test_launch_pinning.py through the launcher: writes the processors this
worker, and a thread it starts, may run on to DIR/rankN.json."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path


def main(out_dir: str) -> None:
    seen: dict[str, list[int]] = {"process": sorted(os.sched_getaffinity(0))}

    def record() -> None:  # a thread started later, as gloo's I/O and work threads are
        seen["thread"] = sorted(os.sched_getaffinity(0))

    thread = threading.Thread(target=record)
    thread.start()
    thread.join()
    Path(out_dir, f"rank{os.environ['RANK']}.json").write_text(json.dumps(seen))


if __name__ == "__main__":
    main(sys.argv[1])
