"""Load time and memory of a 1M-row replay buffer's checkpoint arrays (Ant-v5's sizes, 839 MB),
copied into a live buffer's preallocated rows as a resume does: training.checkpoints.npz_arrays
(memory maps of buffer.npz) against safetensors (safe_open + get_tensor, and load_file) and
np.load. Each way in a fresh process, rounds alternating; the files are in the page cache (warm).

    uv run --with safetensors python labs/checkpoint_arrays/measure.py make /tmp/ckpt   # writes both files
    uv run --with safetensors python labs/checkpoint_arrays/measure.py 3 /tmp/ckpt      # 3 rounds

safetensors is not a dependency of the project: `--with` adds it to this one command."""
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np

ROWS, OBS, ACT = 1_000_000, 105, 8  # Ant-v5's observation and action sizes
DIR = sys.argv[2] if len(sys.argv) > 2 else "/tmp/ckpt"  # 1.8 GB of files

def layout():
    return {"obs": ((ROWS, OBS), np.float32), "next_obs": ((ROWS, OBS), np.float32), "action": ((ROWS, ACT), np.float32),
            "reward": ((ROWS,), np.float32), "discount": ((ROWS,), np.float32), "cursor": ((), np.int64)}

def rss(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) * 1024
    return 0

def child(kind):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    rows = {k: np.zeros(s, d) for k, (s, d) in layout().items()}
    for a in rows.values():
        a.fill(1)  # touch every page, as a live buffer's rows are
    peak = [0, 0]
    stop = False
    def sample():
        while not stop:
            anon = rss("RssAnon:")
            peak[0] = max(peak[0], anon + rss("RssFile:") + rss("RssShmem:"))
            peak[1] = max(peak[1], anon)
            time.sleep(0.002)
    base_anon, base_total = rss("RssAnon:"), rss("VmRSS:")
    t = threading.Thread(target=sample)
    t.start()
    t0 = time.perf_counter()
    if kind == "npz":
        from training.checkpoints import npz_arrays
        arrays = npz_arrays(f"{DIR}/buffer.npz")
        for k, a in arrays.items():
            rows[k][...] = a
        del arrays
    elif kind == "npz_np_load":
        with np.load(f"{DIR}/buffer.npz", allow_pickle=False) as f:
            for k in f.files:
                rows[k][...] = f[k]
    elif kind == "safetensors_open":
        from safetensors import safe_open
        with safe_open(f"{DIR}/buffer.safetensors", framework="np") as f:
            for k in f.keys():
                rows[k][...] = f.get_tensor(k)
    elif kind == "safetensors_load_file":
        from safetensors.numpy import load_file
        for k, a in load_file(f"{DIR}/buffer.safetensors").items():
            rows[k][...] = a
    dt = time.perf_counter() - t0
    stop = True
    t.join()
    print(json.dumps({"kind": kind, "seconds": dt, "peak_over_rows_MB": (peak[0] - base_total) / 2**20,
                      "peak_anon_over_rows_MB": (peak[1] - base_anon) / 2**20, "anon_after_MB": (rss("RssAnon:") - base_anon) / 2**20, "hwm_MB": rss("VmHWM:") / 2**20,
                      "rows_MB": sum(a.nbytes for a in rows.values()) / 2**20}))

if sys.argv[1] == "make":
    rng = np.random.default_rng(0)
    arrays = {k: (rng.standard_normal(s).astype(d) if s else np.array(7, d)) for k, (s, d) in layout().items()}
    np.savez(f"{DIR}/buffer.npz", **arrays)
    from safetensors.numpy import save_file
    save_file({k: np.ascontiguousarray(v) for k, v in arrays.items()}, f"{DIR}/buffer.safetensors")
    t0 = time.perf_counter()
    np.savez(f"{DIR}/b2.npz", **arrays)
    t1 = time.perf_counter()
    save_file(arrays, f"{DIR}/b2.safetensors")
    t2 = time.perf_counter()
    print(json.dumps({"save_npz_s": t1 - t0, "save_safetensors_s": t2 - t1,
                      "npz_bytes": os.path.getsize(f"{DIR}/buffer.npz"), "st_bytes": os.path.getsize(f"{DIR}/buffer.safetensors")}))
    os.remove(f"{DIR}/b2.npz")
    os.remove(f"{DIR}/b2.safetensors")
elif sys.argv[1] == "child":
    child(sys.argv[3])
else:
    kinds = ["npz", "safetensors_open", "safetensors_load_file", "npz_np_load"]
    for r in range(int(sys.argv[1])):
        for k in kinds:
            out = subprocess.run([sys.executable, __file__, "child", DIR, k], capture_output=True, text=True)
            print(out.stdout.strip() or out.stderr[-2000:], flush=True)
