"""Exploratory: every snippet that can run as one process, at world size 1 on cuda:0 (NCCL),
as a reader would start it on a one-GPU node. Not a test: a record of what happened."""
import json, os, subprocess, sys, tempfile, time, shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
TR = [str(BIN / "torchrun"), "--standalone", "--nproc_per_node=1"]
PY = [sys.executable]
CASES = [  # snippet, launcher argv prefix, args, companion files
 ("basics/ranks.py", TR, []), ("cheatsheet/ranks.py", TR, []),
 ("ddp/inside_ddp.py", TR, []), ("ddp/local_rank.py", TR, []), ("ddp/monitoring.py", TR, []),
 ("ddp/topology.py", TR, []), ("ddp/train.py", TR, ["--epochs", "2"]),
 ("ddp/train_single.py", PY, []), ("ddp/train_spawn.py", PY, ["--nprocs", "1"]),
 ("ddp/set_epoch.py", PY, []), ("basics/dataparallel.py", PY, []),
 ("memory/dcp_checkpoint.py", TR, ["--epochs", "2"]), ("memory/fsdp1.py", TR, []),
 ("memory/fsdp2.py", TR, []), ("memory/fsdp2.py", TR, ["--bf16"]), ("memory/fsdp2.py", TR, ["--offload"]),
 ("memory/fsdp2_meta.py", TR, []), ("memory/fsdp2_tuning.py", TR, []),
 ("memory/memory_breakdown.py", PY, []), ("memory/memory_snapshot.py", TR, []),
 ("memory/zero1.py", TR, []), ("model_parallel/naive.py", PY, []),
 ("model_parallel/tensor_parallel.py", TR, []), ("model_parallel/pipeline_manual.py", TR, []),
 ("performance/amp.py", TR, []), ("performance/amp.py", TR, ["--precision", "fp16"]),
 ("performance/channels_last.py", TR, []), ("performance/compile_ddp.py", TR, []),
 ("performance/data_loading.py", TR, []), ("performance/ddp_knobs.py", TR, []),
 ("performance/no_sync.py", TR, []), ("performance/profiling.py", TR, []),
 ("performance/ring_allreduce.py", TR, []), ("performance/scaling.py", TR, []),
 ("quickstart/train.py", TR, []), ("slurm/train.py", TR, ["--epochs", "1"]),
 ("slurm/train_shards.py", TR, []), ("troubleshooting/allreduce_bw.py", TR, []),
 ("troubleshooting/connect.py", TR, []), ("troubleshooting/divergence.py", TR, []),
 ("troubleshooting/exit_abort.py", TR, []), ("troubleshooting/gpu_placement.py", TR, []),
 ("troubleshooting/node_health.py", TR, []), ("troubleshooting/mismatch.py", TR, ["--fix", "--timeout", "60"]),
 ("troubleshooting/skipped_step.py", TR, []), ("troubleshooting/uneven.py", TR, []),
 ("troubleshooting/hang.py", TR, ["--skip-rank", "5"]),
]
if os.environ.get("SMOKE_ONLY"):
    CASES = [c for c in CASES if c[0] in os.environ["SMOKE_ONLY"].split(",")]
def one(case):
    script, pre, args = case
    work = Path(tempfile.mkdtemp(prefix="smoke-"))
    shutil.copy(ROOT / "snippets" / script, work)
    if script.startswith("slurm/train_shards"):
        shutil.copy(ROOT / "snippets/slurm/train.py", work)
    t = time.monotonic()
    env = {**os.environ, "OMP_NUM_THREADS": "2", "PYTHONUNBUFFERED": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(29500 + abs(hash(str(case))) % 20000),
           "TORCHINDUCTOR_CACHE_DIR": str(work / "inductor")}
    try:
        p = subprocess.run([*pre, Path(script).name, *args], cwd=work, env=env, capture_output=True,
                           text=True, timeout=150, start_new_session=True)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = "timeout", (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or ""), (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
    return {"snippet": script, "command": " ".join([Path(pre[0]).name, *pre[1:], Path(script).name, *args]),
            "rc": rc, "seconds": round(time.monotonic() - t, 1),
            "stdout_tail": out[-1500:], "stderr_tail": err[-2500:]}
with ThreadPoolExecutor(6) as pool:
    results = list(pool.map(one, CASES))
out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
(out / "smoke.json").write_text(json.dumps(results, indent=1))
for r in results:
    print(f"{r['rc']!s:>8} {r['seconds']:6.1f}s  {r['command']}")
