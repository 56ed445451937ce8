import time

import torch.distributed as dist

dist.init_process_group("gloo")
# Without a collective, a rank could leave while another is still connecting to it: gloo's
# set-up then fails on that rank with "Connection closed by peer".
dist.barrier()
dist.destroy_process_group()
time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits
