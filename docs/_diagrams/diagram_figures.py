"""The guide's diagrams, drawn from what they show: each function computes its picture
(ranks from nodes and GPUs, the steps of a ring all-reduce, a pipeline schedule...)
and returns it as (SVG, alt text)."""

from __future__ import annotations

from diagram_svg import Drawing

FIGURES = {}


def figure(function):
    FIGURES[function.__name__.replace("_", "-")] = function
    return function


@figure
def topology(nodes=2, gpus=4):
    """Nodes x GPUs -> global rank, local rank and device."""
    box_w, box_h, gap, pad = 92, 54, 10, 14
    node_w = gpus * box_w + (gpus - 1) * gap + 2 * pad
    d = Drawing(nodes * node_w + (nodes - 1) * 30 + 20, 150)
    for n in range(nodes):
        x0 = 10 + n * (node_w + 30)
        d.rect(x0, 10, node_w, 120, rx=8, dashed=True)
        d.text(x0 + node_w / 2, 26, f"node {n}", bold=True)
        for g in range(gpus):
            x = x0 + pad + g * (box_w + gap)
            rank = n * gpus + g
            d.rect(x, 42, box_w, box_h, colour="orange" if rank == 0 else "blue")
            d.text(x + box_w / 2, 56, f"rank {rank}", bold=True)
            d.text(x + box_w / 2, 72, f"local rank {g}", size=11)
            d.text(x + box_w / 2, 86, f"cuda:{g}", size=11)
        d.text(x0 + node_w / 2, 116, f"ranks {n * gpus}–{n * gpus + gpus - 1}: "
               f"rank = {gpus} × node + local rank", size=11, italic=True)
    alt = (f"{nodes} nodes with {gpus} GPUs each: one process per GPU. On node n, the process "
           f"with local rank l drives cuda:l and has global rank {gpus} n + l, so the world "
           f"size is {nodes * gpus}. Rank 0, drawn in another colour, is on node 0.")
    return d, alt


@figure
def torchrun_per_node(nodes=2, gpus=4):
    """The quick start's job: srun starts a torchrun per node; the torchrun commands meet at the
    rendezvous, then each starts one process per GPU of its node."""
    box_w, box_h, gap, pad = 92, 54, 10, 14
    node_w = gpus * box_w + (gpus - 1) * gap + 2 * pad
    width = nodes * node_w + (nodes - 1) * 30 + 20
    d = Drawing(width, 256)
    meet_w = 330
    d.rect(width / 2 - meet_w / 2, 10, meet_w, 30, colour="purple")
    d.text(width / 2, 25, "rendezvous: the torchrun commands agree on the ranks", size=11)
    for n in range(nodes):
        x0 = 10 + n * (node_w + 30)
        centre = x0 + node_w / 2
        d.rect(x0, 60, node_w, 186, rx=8, dashed=True)
        d.text(centre, 76, f"node {n}", bold=True)
        d.rect(x0 + pad, 88, node_w - 2 * pad, 28, colour="green")
        d.text(centre, 102, "torchrun, one srun task", size=11)
        towards = -1 if centre > width / 2 else 1
        start = centre + towards * 0.35 * node_w  # clear of the node's name
        end = min(max(start, width / 2 - meet_w / 2 + 20), width / 2 + meet_w / 2 - 20)
        d.line(start, 88, end, 42)
        for g in range(gpus):
            x = x0 + pad + g * (box_w + gap)
            rank = n * gpus + g
            d.line(x + box_w / 2, 116, x + box_w / 2, 140)
            d.rect(x, 142, box_w, box_h, colour="orange" if rank == 0 else "blue")
            d.text(x + box_w / 2, 156, f"rank {rank}", bold=True)
            d.text(x + box_w / 2, 172, f"local rank {g}", size=11)
            d.text(x + box_w / 2, 186, f"cuda:{g}", size=11)
        d.text(centre, 222, f"{gpus} processes: ranks {n * gpus}–{n * gpus + gpus - 1}",
               size=11, italic=True)
    alt = (f"A job of {nodes} nodes with {gpus} GPUs each. On every node srun starts one "
           f"torchrun; the torchrun commands first meet at the rendezvous and agree on the ranks, "
           f"then each starts {gpus} processes, one per GPU of its node. On node n, the "
           f"process with local rank l drives cuda:l and has rank {gpus} n + l, so the world "
           f"size is {nodes * gpus}.")
    return d, alt


@figure
def dp_vs_ddp(gpus=3):
    """DataParallel: one process, through cuda:0. DDP: one process per GPU, all-reduce."""
    d = Drawing(700, 250)
    # DataParallel
    d.rect(10, 10, 330, 230, rx=8, dashed=True)
    d.text(175, 26, "DataParallel: one process", bold=True)
    d.rect(30, 44, 290, 40, colour="orange")
    d.text(175, 58, "cuda:0: batch, model, loss, optimiser", size=11)
    d.text(175, 73, "scatter batch · copy model · gather outputs", size=11, italic=True)
    w = 290 / gpus - 8
    for g in range(gpus):
        x = 30 + g * (w + 8)
        d.line(175, 84, x + w / 2, 128)
        d.rect(x, 130, w, 40, colour="blue")
        d.text(x + w / 2, 144, f"cuda:{g}", size=11, bold=True)
        d.text(x + w / 2, 159, "replica, 1/3 of batch" if gpus == 3 else "replica", size=10)
        d.line(x + w / 2, 170, 175, 206)
    d.rect(60, 206, 230, 26, colour="orange")
    d.text(175, 219, "outputs, gradients summed on cuda:0", size=11)
    # DDP
    d.rect(360, 10, 330, 230, rx=8, dashed=True)
    d.text(525, 26, "DistributedDataParallel: a process per GPU", bold=True)
    w = 310 / gpus - 8
    for g in range(gpus):
        x = 370 + g * (w + 8)
        d.rect(x, 44, w, 26, colour="green")
        d.text(x + w / 2, 57, f"shard {g} of the data", size=10)
        d.line(x + w / 2, 70, x + w / 2, 88)
        d.rect(x, 90, w, 60, colour="blue")
        d.text(x + w / 2, 104, f"process {g}, cuda:{g}", size=10, bold=True)
        d.text(x + w / 2, 120, "forward, backward", size=10)
        d.text(x + w / 2, 136, "own optimiser", size=10)
        d.line(x + w / 2, 150, x + w / 2, 176)
    d.rect(370, 178, 310, 30, colour="purple")
    d.text(525, 193, "all-reduce: average the gradients", size=11)
    d.text(525, 224, "same gradients → same step → same model", size=11, italic=True)
    alt = ("Left, DataParallel: one process; at every step cuda:0 scatters the batch and "
           f"copies the model to {gpus} GPUs, then gathers the outputs and sums the gradients "
           "on cuda:0, where the optimiser runs. Right, DistributedDataParallel: one process "
           "per GPU, each with its own shard of the data, model and optimiser; the processes "
           "only exchange gradients, averaged by an all-reduce, so every copy takes the same "
           "step.")
    return d, alt


def ring_steps(n):
    """The chunks each rank holds after every step of a ring all-reduce.

    state[r][c] is the set of ranks whose chunk c rank r has summed so far.
    """
    state = [[{r} for _ in range(n)] for r in range(n)]
    steps = [("start", [[set(s) for s in row] for row in state])]
    for s in range(n - 1):  # reduce-scatter: rank r sends chunk (r - s) to rank r + 1
        sent = [(r, (r - s) % n, set(state[r][(r - s) % n])) for r in range(n)]
        for r, c, value in sent:
            state[(r + 1) % n][c] |= value
        steps.append((f"reduce-scatter {s + 1}", [[set(x) for x in row] for row in state]))
    for s in range(n - 1):  # all-gather: rank r sends its complete chunk (r + 1 - s) on
        sent = [(r, (r + 1 - s) % n, set(state[r][(r + 1 - s) % n])) for r in range(n)]
        for r, c, value in sent:
            state[(r + 1) % n][c] = value
        steps.append((f"all-gather {s + 1}", [[set(x) for x in row] for row in state]))
    return steps


@figure
def ring_allreduce(n=4):
    steps = ring_steps(n)
    cell, gap = 26, 6
    rank_w = n * cell + 12
    d = Drawing(130 + n * (rank_w + 14), 40 + len(steps) * (cell + gap) + 30)
    for r in range(n):
        x = 130 + r * (rank_w + 14)
        d.text(x + rank_w / 2, 18, f"rank {r}", bold=True)
    for i, (label, state) in enumerate(steps):
        y = 34 + i * (cell + gap)
        d.text(10, y + cell / 2, label, size=11, anchor="start")
        for r in range(n):
            x = 136 + r * (rank_w + 14)
            for c in range(n):
                have = len(state[r][c])
                colour = "green" if have == n else ("blue" if have > 1 else None)
                d.rect(x + c * cell, y, cell - 2, cell - 2, colour=colour, rx=2)
                d.text(x + c * cell + cell / 2 - 1, y + cell / 2, have, size=10)
    y = 34 + len(steps) * (cell + gap) + 8
    d.text(10, y, f"number in a chunk: how many ranks' values it sums; green: all {n}. "
           f"{2 * (n - 1)} steps, each sending 1/{n} of the data.", size=11, anchor="start")
    alt = (f"Ring all-reduce over {n} ranks, each holding its data cut into {n} chunks. In "
           f"each of {n - 1} reduce-scatter steps every rank sends one chunk to the next rank, "
           "which adds it to its own; afterwards each rank holds one chunk summed over all "
           f"ranks. In {n - 1} all-gather steps the complete chunks travel on around the ring "
           "until every rank holds every summed chunk.")
    return d, alt


COLLECTIVES = ["broadcast", "scatter", "gather", "reduce", "all_gather", "reduce_scatter",
               "all_reduce", "all_to_all"]


def collective(name, n):
    """Before and after: lists of cell labels per rank."""
    letters = "ABCD"
    if name in ("broadcast", "scatter"):
        first = ["A0"] if name == "broadcast" else [f"A{c}" for c in range(n)]
        before = [first if r == 0 else [] for r in range(n)]
    elif name in ("reduce_scatter", "all_to_all"):
        before = [[f"{letters[r]}{c}" for c in range(n)] for r in range(n)]
    else:
        before = [[letters[r]] for r in range(n)]
    total = "+".join(letters[:n])
    after = {
        "broadcast": [["A0"] for _ in range(n)],
        "scatter": [[f"A{r}"] for r in range(n)],
        "gather": [list(letters[:n]) if r == 0 else [letters[r]] for r in range(n)],
        "reduce": [[total] if r == 0 else [letters[r]] for r in range(n)],
        "all_gather": [list(letters[:n]) for _ in range(n)],
        "reduce_scatter": [["+".join(f"{letters[s]}{r}" for s in range(n))] for r in range(n)],
        "all_reduce": [[total] for _ in range(n)],
        "all_to_all": [[f"{letters[s]}{r}" for s in range(n)] for r in range(n)],
    }[name]
    return before, after


@figure
def collectives(n=4):
    cell_w, cell_h = 30, 18
    panel_w, panel_h = 330, 34 + n * (cell_h + 4)
    cols = 2
    rows = (len(COLLECTIVES) + cols - 1) // cols
    d = Drawing(cols * panel_w + 20, rows * (panel_h + 12) + 10)
    for i, name in enumerate(COLLECTIVES):
        before, after = collective(name, n)
        x0 = 10 + (i % cols) * panel_w
        y0 = 10 + (i // cols) * (panel_h + 12)
        d.rect(x0, y0, panel_w - 10, panel_h, rx=6, dashed=True)
        d.text(x0 + 10, y0 + 14, name, anchor="start", bold=True)
        for r in range(n):
            y = y0 + 28 + r * (cell_h + 4)
            d.text(x0 + 12, y + cell_h / 2, f"r{r}", size=10, anchor="start")
            for side, cells, xs in (("before", before[r], x0 + 32), ("after", after[r], x0 + 180)):
                wide = cell_w * (2.4 if any("+" in c for c in cells) else 1)
                for k, label in enumerate(cells):
                    d.rect(xs + k * (wide + 2), y, wide, cell_h, colour="blue" if side == "before"
                           else "green", rx=2)
                    d.text(xs + k * (wide + 2) + wide / 2, y + cell_h / 2, label, size=9)
        d.line(x0 + 158, y0 + 28 + n * (cell_h + 4) / 2, x0 + 174, y0 + 28 + n * (cell_h + 4) / 2)
    alt = (f"What each collective does, with {n} ranks r0 to r{n - 1}: the data on each rank "
           "before (left) and after (right). broadcast copies A0 from rank 0 to all; scatter "
           "gives chunk i of rank 0 to rank i; gather collects every rank's value on rank 0; "
           "reduce sums them on rank 0; all_gather gives every rank all values; "
           "reduce_scatter sums chunk i over all ranks onto rank i; all_reduce gives every "
           "rank the sum; all_to_all sends chunk j of rank i to rank j.")
    return d, alt


def pipeline_schedule(kind, p, m, f=1, b=2):
    """Start ticks of every forward (F) and backward (B) pass: {(stage, "F"|"B", i): (start, end)}."""
    orders = []
    for s in range(p):
        if kind == "gpipe":
            order = [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
        else:  # 1F1B: warm up with forwards, then alternate, then drain the backwards
            warm = min(p - s - 1, m)
            order = [("F", i) for i in range(warm)]
            fwd, bwd = warm, 0
            while bwd < m:
                if fwd < m:
                    order.append(("F", fwd))
                    fwd += 1
                order.append(("B", bwd))
                bwd += 1
        orders.append(order)
    done, free, pos = {}, [0] * p, [0] * p
    while any(pos[s] < len(orders[s]) for s in range(p)):
        progressed = False
        for s in range(p):
            if pos[s] == len(orders[s]):
                continue
            op, i = orders[s][pos[s]]
            need = ([(s - 1, "F", i)] if op == "F" and s > 0 else
                    [(s, "F", i)] + ([(s + 1, "B", i)] if s < p - 1 else []) if op == "B" else [])
            if all(n in done for n in need):
                start = max([free[s]] + [done[n][1] for n in need])
                done[s, op, i] = (start, start + (f if op == "F" else b))
                free[s] = done[s, op, i][1]
                pos[s] += 1
                progressed = True
        assert progressed, "the schedule deadlocked"
    return done


@figure
def pipeline_schedules(p=4, m=4):
    tick, row_h = 22, 22
    schedules = {name: pipeline_schedule(name, p, m) for name in ("gpipe", "1f1b")}
    length = max(end for s in schedules.values() for _, end in s.values())
    d = Drawing(max(90 + length * tick, 640), 2 * (p * (row_h + 4) + 40) + 24)
    lines = []
    for k, (name, done) in enumerate(schedules.items()):
        y0 = 10 + k * (p * (row_h + 4) + 40)
        busy = sum(end - start for start, end in done.values())
        idle = 1 - busy / (p * length)
        title = "GPipe" if name == "gpipe" else "1F1B"
        d.text(10, y0 + 8, f"{title}: idle {idle:.0%} of the time", anchor="start", bold=True)
        lines.append(f"{title} idles {idle:.0%}")
        for s in range(p):
            y = y0 + 20 + s * (row_h + 4)
            d.text(10, y + row_h / 2, f"stage {s}", size=11, anchor="start")
            d.rect(80, y, length * tick, row_h, rx=2, dashed=True)
            for (stage, op, i), (start, end) in done.items():
                if stage == s:
                    d.rect(80 + start * tick, y, (end - start) * tick, row_h,
                           colour="blue" if op == "F" else "orange", rx=2)
                    d.text(80 + (start + end) / 2 * tick, y + row_h / 2, f"{op}{i}", size=10)
    y = d.height - 14
    d.text(10, y, f"{p} stages, {m} micro-batches; F: forward (1 tick), B: backward (2 ticks); "
           f"bubble (p − 1)/(m + p − 1) = {p - 1}/{m + p - 1}", size=11, anchor="start")
    alt = (f"Pipeline schedules for {p} stages and {m} micro-batches, time running right. "
           "With GPipe each stage runs all forward passes, then all backward passes. With 1F1B "
           "each stage alternates one forward and one backward pass as soon as it can, so it "
           "holds fewer activations. Both leave the same idle time: "
           + " and ".join(lines) + f", ({p} − 1)/({m} + {p} − 1) of it.")
    return d, alt


@figure
def zero_stages(n=4):
    """Memory per GPU for mixed-precision Adam: 2 + 2 + 12 bytes per parameter (ZeRO paper)."""
    parts = [("parameters", 2, "blue"), ("gradients", 2, "orange"), ("optimiser state", 12, "green")]
    stages = [("DDP", 0), ("ZeRO-1", 1), ("ZeRO-2", 2), ("ZeRO-3 / FSDP", 3)]
    unit = 11  # pixels per byte per parameter
    col_w, gpu_w = 160, 30
    d = Drawing(len(stages) * col_w + 20, 16 * unit + 100)
    base = 16 * unit + 40
    for k, (name, sharded) in enumerate(stages):
        x0 = 10 + k * col_w
        total = sum(size / n if i < sharded else size
                    for i, (_, size, _) in enumerate(reversed(parts)))
        d.text(x0 + col_w / 2 - 8, 14, name, bold=True)
        for g in range(n):
            x = x0 + g * (gpu_w + 3)
            y = base
            for i, (label, size, colour) in enumerate(parts):
                is_sharded = (len(parts) - 1 - i) < sharded
                h = size * unit / n if is_sharded else size * unit
                y -= h
                d.rect(x, y, gpu_w, h, colour=colour, rx=1)
            d.text(x + gpu_w / 2, base + 10, f"{g}", size=9)
        d.text(x0 + col_w / 2 - 8, base + 26, f"{total:g} bytes/param", size=11)
    d.text(10, base + 46, f"GPUs 0–{n - 1}; bytes per parameter for mixed-precision Adam: "
           "parameters 2, gradients 2, optimiser state 12 (blue, orange, green)", size=11,
           anchor="start")
    alt = (f"Memory per GPU with {n} GPUs and mixed-precision Adam, 16 bytes per parameter in "
           "all: 2 for the parameters, 2 for the gradients, 12 for the optimiser state. DDP "
           "keeps all of it on every GPU (16). ZeRO-1 shards the optimiser state "
           f"({4 + 12 / n:g}), ZeRO-2 also the gradients ({2 + 14 / n:g}), ZeRO-3 or FSDP also "
           f"the parameters ({16 / n:g} bytes per parameter).")
    return d, alt
