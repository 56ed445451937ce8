#!/bin/bash
# Two processes: each one's stdout and stderr go to its own files under logs/,
# and only local rank 0 still prints in the terminal.
torchrun --standalone --nproc_per_node=2 \
    --log-dir=logs --redirects=3 --tee=3 --local-ranks-filter=0 \
    ranks.py
# logs/<run id>_<random>/attempt_<restart>/<local rank>/stdout.log and stderr.log
cat logs/*/attempt_0/1/stdout.log
