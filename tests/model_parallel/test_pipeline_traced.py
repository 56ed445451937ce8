"""snippets/model_parallel/pipeline_traced.py, shown on docs/model_parallel/pipeline.md."""

import pytest
from torch import nn
from torch.distributed.pipelining import SplitPoint, pipe_split, pipeline

from harness.launch import run
from tests.devices import on_each_device
from tests.model_parallel.reference import assert_run_matches, snippet_code, trained_in_one_process

SNIPPET = "model_parallel/pipeline_traced.py"


@on_each_device(gpus=2)
def test_two_traced_stages_give_the_loss_and_gradients_of_one_process(device, tmp_path):
    result = run(SNIPPET, launcher="torchrun", nproc=2, workdir=tmp_path, env=device.env())
    device.assert_ran(2, result=result)
    device.check_output(result)
    assert "stage 1 on rank 1 holds: 4.weight, 4.bias, 6.weight, 6.bias" in result.stdout
    assert_run_matches(result, trained_in_one_process(SNIPPET))


@pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning")  # inside torch.export
def test_pipe_split_in_forward_cuts_where_split_spec_does():
    """The page's alternative: a pipe_split() call in forward instead of split_spec."""
    code = snippet_code(SNIPPET)

    class Marked(nn.Sequential):
        def forward(self, x):
            for i, layer in enumerate(self):
                if i == 4:
                    pipe_split()
                x = layer(x)
            return x

    x = code["make_batch"]()[0].chunk(code["MICROBATCHES"])[0]
    by_spec = pipeline(code["build_model"](), mb_args=(x,), split_spec={"4": SplitPoint.BEGINNING})
    by_call = pipeline(Marked(*code["build_model"]()), mb_args=(x,))
    assert by_spec.num_stages == by_call.num_stages == 2
    for i in range(2):
        assert ([n for n, _ in by_spec.get_stage_module(i).named_parameters()]
                == [n for n, _ in by_call.get_stage_module(i).named_parameters()])
