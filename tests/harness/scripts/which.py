"""Prints where the PATH finds each program named on the command line."""

import shutil
import sys

for name in sys.argv[1:]:
    print(name, shutil.which(name))
