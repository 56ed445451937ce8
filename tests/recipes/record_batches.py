"""``python tests/recipes/record_batches.py SCRIPT ARGS...``, under any launcher, runs
SCRIPT as that launcher would, and writes down what each training step was given: every
batch of a ``DataLoader`` with ``drop_last=True`` (the training loader of train_ddp.py;
its validation loader keeps the last batch) becomes a line of ``batches-<rank>.jsonl``
in the working directory, with the labels of its images and a fingerprint of each image
as the model sees it, after its crop and flip. Nothing the script computes changes.
"""

import hashlib
import json
import os
import runpy
import sys
from pathlib import Path

import torch.utils.data


class RecordingLoader(torch.utils.data.DataLoader):
    def __iter__(self):
        for batch in super().__iter__():
            if self.drop_last:
                images, labels = batch
                record = {"labels": labels.tolist(),
                          "images": [hashlib.sha1(image.numpy().tobytes()).hexdigest()
                                     for image in images]}
                with open(f"batches-{os.environ.get('RANK', '0')}.jsonl", "a") as f:
                    print(json.dumps(record), file=f)
            yield batch


def recorded(workdir, rank):
    """The batches rank ``rank`` trained on, in order: (labels, image fingerprints)."""
    lines = Path(workdir, f"batches-{rank}.jsonl").read_text().splitlines()
    return [(json.loads(line)["labels"], json.loads(line)["images"]) for line in lines]


if __name__ == "__main__":
    torch.utils.data.DataLoader = RecordingLoader
    sys.argv = sys.argv[1:]
    sys.path[0] = str(Path(sys.argv[0]).parent)
    runpy.run_path(sys.argv[0], run_name="__main__")
