"""Estimate the memory each GPU needs for a model's states under DDP, ZeRO and FSDP.

Model states are the parameters, their gradients and the optimiser state
(including the fp32 master copy of the parameters where the framework keeps
one). Activations, temporary buffers (communication buckets, gathered layers)
and the CUDA context come on top and are NOT included.

Examples:
  python estimate_memory.py --params 7B --gpus 8
  python estimate_memory.py --layers 32 --hidden 4096 --vocab 32000 --gpus 8 \
      --gpu-memory 80
  python estimate_memory.py --params 13B --gpus 8 --strategy zero3 fsdp2 --offload

Only the standard library is needed: run it anywhere, before you ask for GPUs.
"""

import argparse
import json
import math
import re

STRATEGIES = ["ddp", "zero1", "zero2", "zero3", "fsdp2"]
#: Which framework implements each strategy, and which one is assumed by default.
FRAMEWORKS = {"pytorch": ["ddp", "zero1", "fsdp2"],
              "deepspeed": ["zero1", "zero2", "zero3"]}
DEFAULT_FRAMEWORK = {"ddp": "pytorch", "zero1": "pytorch", "fsdp2": "pytorch",
                     "zero2": "deepspeed", "zero3": "deepspeed"}
CAN_OFFLOAD = {("pytorch", "fsdp2"), ("deepspeed", "zero2"), ("deepspeed", "zero3")}
#: Bytes of optimiser state per parameter: Adam's two moments, or SGD's momentum.
OPTIMIZER_BYTES = {"adam": 8, "sgd": 4}
#: Bytes per element of the weights a framework computes with.
WORKING_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
GIB = 2**30
CATEGORIES = ("parameters", "gradients", "optimizer")


def model_states(params, gpus, strategy, framework, precision, optimizer, offload):
    """Bytes of parameters, gradients and optimiser state per GPU and in CPU memory.

    Returns {"parameters": (gpu, host), "gradients": (gpu, host),
    "optimizer": (gpu, host)}: bytes on each GPU, and per rank in CPU memory.
    """
    n, k = gpus, OPTIMIZER_BYTES[optimizer]
    if framework == "pytorch":
        # PyTorch keeps fp32 parameters and gradients even in mixed precision:
        # autocast and FSDP2's MixedPrecisionPolicy cast copies on the fly.
        shards = {"ddp": (1, 1, 1), "zero1": (1, 1, n), "fsdp2": (n, n, n)}[strategy]
        full = {"parameters": 4 * params, "gradients": 4 * params,
                "optimizer": k * params}
        states = {name: full[name] / shard for name, shard in zip(CATEGORIES, shards)}
        on_host = list(CATEGORIES) if offload else []
    else:
        # DeepSpeed ZeRO (every stage, without gradient accumulation): weights and
        # gradients in the working precision, gradients partitioned as soon as they
        # are reduced, and an fp32 master copy of this rank's partition next to the
        # optimiser state, even when training in fp32.
        w = WORKING_BYTES[precision]
        states = {"parameters": w * params / (n if strategy == "zero3" else 1),
                  "gradients": w * params / n,
                  "optimizer": (k + 4) * params / n}
        on_host = []
        if offload:  # the optimiser steps on the CPU, on fp32 gradients
            on_host = ["gradients", "optimizer"]
            states["gradients"] = 4 * params / n
            if strategy == "zero3":  # and its gradient partition in working precision
                on_host.append("parameters")
                states["gradients"] += w * params / n
    return {name: (0.0, b) if name in on_host else (b, 0.0)
            for name, b in states.items()}


def count(text):
    """A size such as 7e9, 7B, 1.3b, 350M or 125k; refuses zero and negative sizes."""
    match = re.fullmatch(r"\s*([-+]?[0-9.]+(?:e[+-]?\d+)?)\s*([kKmMbBtT]?)\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (try 7e9, 7B, 350M)")
    unit = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}[match[2].lower()]
    try:
        value = float(match[1]) * unit
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (try 7e9, 7B, 350M)") \
            from None
    if not math.isfinite(value) or value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 and finite, got {text!r}")
    return int(value)


def positive(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(
            f"must be greater than 0 and finite, got {text!r}")
    return value


def transformer_params(layers, hidden, vocab):
    """Parameters of a GPT-style transformer: 12 h^2 + 13 h per layer, and embedding."""
    return layers * (12 * hidden**2 + 13 * hidden) + vocab * hidden


def human(nbytes):
    for unit, size in (("GiB", GIB), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= size:
            return f"{nbytes / size:.1f} {unit}"
    return f"{nbytes:.0f} B"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    size = p.add_mutually_exclusive_group(required=True)
    size.add_argument("--params", type=count,
                      help="number of parameters, e.g. 7B, 1.3e9, 350M")
    size.add_argument("--layers", type=int,
                      help="transformer layers (with --hidden and --vocab)")
    p.add_argument("--hidden", type=int, help="transformer hidden size")
    p.add_argument("--vocab", type=int, default=0, help="vocabulary size (default 0)")
    p.add_argument("--gpus", type=int, default=1,
                   help="number of GPUs sharing the work (default 1)")
    p.add_argument("--precision", choices=WORKING_BYTES, default="bf16",
                   help="fp32, or bf16/fp16 mixed precision (default bf16)")
    p.add_argument("--optimizer", choices=OPTIMIZER_BYTES, default="adam",
                   help="adam (2 moments) or sgd with momentum (default adam)")
    p.add_argument("--strategy", nargs="+", choices=STRATEGIES,
                   help="default: every one")
    p.add_argument("--framework", choices=FRAMEWORKS,
                   help="default: pytorch for ddp, zero1 and fsdp2, "
                        "deepspeed for zero2 and zero3")
    p.add_argument("--offload", action="store_true",
                   help="keep the states that the framework can offload in CPU memory")
    p.add_argument("--gpu-memory", type=positive, metavar="GIB",
                   help="memory of one GPU in GiB: show what is left for activations")
    p.add_argument("--json", action="store_true", help="print exact bytes as JSON")
    args = p.parse_args(argv)

    if args.layers is not None:
        if args.hidden is None:
            p.error("--layers needs --hidden (and usually --vocab)")
        if args.layers < 1 or args.hidden < 1 or args.vocab < 0:
            p.error("--layers and --hidden must be at least 1, --vocab at least 0")
        args.params = transformer_params(args.layers, args.hidden, args.vocab)
    elif args.hidden is not None:
        p.error("--hidden goes with --layers, not with --params")
    if args.gpus < 1:
        p.error(f"--gpus must be at least 1, got {args.gpus}")

    if args.strategy:  # what was asked for, each with its framework
        wanted = [(s, args.framework or DEFAULT_FRAMEWORK[s]) for s in args.strategy]
    else:  # everything the framework (or either framework) offers
        wanted = [(s, f) for f in ([args.framework] if args.framework else FRAMEWORKS)
                  for s in FRAMEWORKS[f]]
    rows = []
    for strategy, framework in wanted:
        if strategy not in FRAMEWORKS[framework]:
            offers = ", ".join(FRAMEWORKS[framework])
            p.error(f"{framework} has no {strategy}: it offers {offers}")
        if args.offload and (framework, strategy) not in CAN_OFFLOAD:
            if args.strategy:
                p.error(f"{strategy} with {framework} cannot offload to the CPU here: "
                        f"offload works with fsdp2, zero2 and zero3")
            continue
        rows.append((strategy, framework))
    args.rows = rows
    return args


def main(argv=None):
    args = parse_args(argv)
    results = []
    for strategy, framework in args.rows:
        states = model_states(args.params, args.gpus, strategy, framework,
                              args.precision, args.optimizer, args.offload)
        results.append({
            "strategy": strategy, "framework": framework, "offload": args.offload,
            "gpus": args.gpus, "params": args.params, "precision": args.precision,
            "optimizer": args.optimizer, "states": states,
            "gpu_total": sum(gpu for gpu, _ in states.values()),
            "host_total": sum(host for _, host in states.values()),
        })
    if args.json:
        print(json.dumps(results, indent=1))
        return

    print(f"Model states per GPU for {args.params:,} parameters, {args.precision}, "
          f"{args.optimizer}, {args.gpus} GPU{'s' if args.gpus > 1 else ''}"
          f"{', offloaded where possible' if args.offload else ''}")
    header = (f"{'strategy':<8} {'framework':<10} {'parameters':>11} {'gradients':>11} "
              f"{'optimiser':>11} {'GPU total':>11} {'CPU/rank':>11}")
    if args.gpu_memory:
        header += f" {'left on a ' + format(args.gpu_memory, 'g') + ' GiB GPU':>22}"
    print(header)
    for r in results:
        on_gpu = [r["states"][name][0] for name in CATEGORIES]
        line = f"{r['strategy']:<8} {r['framework']:<10} "
        line += " ".join(f"{human(b):>11}" for b in on_gpu)
        line += f" {human(r['gpu_total']):>11} {human(r['host_total']):>11}"
        if args.gpu_memory:
            left = args.gpu_memory * GIB - r["gpu_total"]
            line += f" {human(left) if left > 0 else 'does not fit':>22}"
        print(line)
    print("Not included: activations, temporary buffers (communication buckets, "
          "gathered layers)\nand the CUDA context. Leave room for them.")


if __name__ == "__main__":
    main()
