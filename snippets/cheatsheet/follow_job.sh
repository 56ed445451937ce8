#!/bin/bash
# Submit a job, look at it while it waits or runs, and cancel it.
jobid=$(sbatch --parsable --job-name=sleeper --time=00:05:00 --wrap="sleep 300")
echo "submitted job $jobid"
squeue --me --name=sleeper --noheader --format="%j, job %i"  # your jobs called sleeper
scontrol show job "$jobid" | grep -o "NumNodes=[0-9]*"
scancel "$jobid"
for _ in {1..60}; do                          # Slurm takes a moment to end it
    state=$(scontrol show job "$jobid" | grep -o "JobState=[A-Z]*")
    [[ $state =~ PENDING|RUNNING|COMPLETING ]] || break
    sleep 1
done
scontrol show job "$jobid" | grep -o "JobState=[A-Z]*"
