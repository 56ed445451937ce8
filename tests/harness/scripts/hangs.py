import subprocess
import sys
import time

subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
print("started a child in its own session; now hanging", flush=True)
time.sleep(600)
