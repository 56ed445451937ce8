#!/bin/bash
# Print the Python stack of every rank of a running job, node by node.
# Usage, from a login node:  bash dump_stacks.sh JOBID
# Needs py-spy (pip install py-spy) in the environment the job runs in, and
# permission to attach to your own processes on the compute nodes (ptrace).
set -euo pipefail
job=$1
nodes=$(squeue --noheader --jobs="$job" --format=%D)

# One more task on every node of the job, next to the tasks already running
# there (--overlap), with the number of its node in front of each line (--label).
srun --jobid="$job" --overlap --nodes="$nodes" --ntasks-per-node=1 --label \
    bash -c '
    # The Python processes of this job on this node, and their ranks: RANK if
    # torchrun started them, SLURM_PROCID if srun did.
    for pid in $(pgrep -u "$(id -u)" "^python"); do
        vars=$(tr "\0" "\n" 2> /dev/null < "/proc/$pid/environ") || continue
        grep -qx "SLURM_JOB_ID=$SLURM_JOB_ID" <<< "$vars" || continue
        grep -qx "SLURMD_NODENAME=$SLURMD_NODENAME" <<< "$vars" || continue
        rank=$(sed -n "s/^RANK=//p" <<< "$vars")
        echo "${rank:-$(sed -n "s/^SLURM_PROCID=//p" <<< "$vars")} $pid"
    done | sort -n | while read -r rank pid; do
        echo "rank $rank on $SLURMD_NODENAME, pid $pid:"
        py-spy dump --pid "$pid" | tail -n +4  # from "Thread ...": the stack
    done' | sort --stable --numeric-sort --key=1,1
