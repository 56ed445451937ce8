"""snippets/model_parallel/tp_src_data_rank.py, shown on
docs/model_parallel/tensor_parallel_practice.md."""

from harness.launch import run
from tests.devices import on_each_device

SNIPPET = "model_parallel/tp_src_data_rank.py"
PARAMS = ["0.weight", "0.bias", "2.weight", "2.bias", "3.weight", "3.bias"]


def tables(stdout):
    """{way: (collectives, {parameter: [whose, on each rank]})} from the output."""
    found, current = {}, None
    for line in stdout.splitlines():
        if not line.startswith(" "):
            way, _, comms = line.partition(" (")
            current = found[way] = (comms.rstrip(")"), {})
        elif line.split()[0] in PARAMS:
            name, rest = line.split(maxsplit=1)
            current[1][name] = [cell.strip() for cell in rest.split("  ") if cell.strip()]
    return found


@on_each_device(gpus=2, one_gpu=True)
def test_parallelize_module_sends_rank_0s_weights(device, tmp_path):
    """On one GPU a mesh of one device: rank 0's weights are all there is."""
    ranks = device.ranks(2)
    result = run(SNIPPET, launcher="torchrun", nproc=ranks, workdir=tmp_path, env=device.env())
    device.assert_ran(ranks, result=result)
    device.check_output(result)
    found = tables(result.stdout)
    assert list(found) == ["src_data_rank=0", "src_data_rank=None", "fully_shard"]
    if ranks == 1:
        for way, (_, whose) in found.items():
            assert whose == {name: ["rank 0's"] for name in PARAMS}, way
        return
    r0, r1, mix = "rank 0's", "rank 1's", "a mix"
    # the split layers come from rank 0: a scatter for each sharded tensor (0.weight,
    # 0.bias, 2.weight), a broadcast for the replicated bias of the row-wise layer;
    # the layer outside the plan stays as each rank built it
    assert found["src_data_rank=0"] == ("broadcast 1, scatter 3", {
        "0.weight": [r0, r0], "0.bias": [r0, r0], "2.weight": [r0, r0], "2.bias": [r0, r0],
        "3.weight": [r0, r1], "3.bias": [r0, r1]})
    # no communication: each rank keeps its own piece; the pieces make neither model
    assert found["src_data_rank=None"] == ("-", {
        "0.weight": [mix, mix], "0.bias": [mix, mix], "2.weight": [mix, mix],
        "2.bias": [r0, r1], "3.weight": [r0, r1], "3.bias": [r0, r1]})
    # fully_shard cuts each rank's own copy, without communication
    assert found["fully_shard"] == ("-", {name: [mix, mix] for name in PARAMS})
