"""Print where this process runs: node, rank, local rank, GPU and CPU threads.

Start it like a training script, with srun or torchrun, and sort the lines:
    srun python whereami.py | sort -n -k 2
"""

import os
import socket
import sys

if "RANK" in os.environ:  # started by torchrun
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
elif "SLURM_STEP_ID" in os.environ:  # started by srun, which runs tasks in a job step
    names = ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")
else:  # no launcher, or the job script itself (its SLURM_PROCID is 0, always)
    sys.exit("whereami.py: no launcher started it; start it with srun or torchrun "
             "(in a job script: srun python whereami.py)")
rank, world_size, local_rank = (os.environ[name] for name in names)
node = os.environ.get("SLURMD_NODENAME", socket.gethostname())  # Slurm's name for it
gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "")  # the GPUs Slurm gave the job here
threads = os.environ.get("OMP_NUM_THREADS", "")
line = (f"rank {rank} of {world_size}: {node}, local rank {local_rank}, "
        f"cuda:{local_rank}, CUDA_VISIBLE_DEVICES={gpus}, OMP_NUM_THREADS={threads}")
sys.stdout.write(line + "\n")  # one write: lines of processes sharing a file never mix
