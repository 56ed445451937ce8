"""Prints whether PYTHONUNBUFFERED is set and whether its standard output is buffered,
and OMP_NUM_THREADS."""

import os
import sys

print("PYTHONUNBUFFERED", os.environ.get("PYTHONUNBUFFERED", "unset"))
print("stdout", "unbuffered" if sys.stdout.write_through else "buffered")
print("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "unset"))
