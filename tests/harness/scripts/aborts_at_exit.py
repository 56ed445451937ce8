"""Prints its result, then aborts as gloo's shutdown crash does, or (--plain) without its line."""

import os
import sys

print("done", flush=True)
if "--plain" not in sys.argv:
    print("terminate called without an active exception", file=sys.stderr, flush=True)
os.abort()
