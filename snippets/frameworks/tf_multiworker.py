"""Train on several machines: MultiWorkerMirroredStrategy, a custom training loop.

Start one worker per node. Each learns the cluster and its place in it from TF_CONFIG,
which the job script sets, or which this script builds from Slurm's variables:
    srun --ntasks-per-node=1 python tf_multiworker.py
Without either, it trains alone on this machine: python tf_multiworker.py
Each worker uses every GPU of its node; without GPUs, the CPU.
"""

import argparse
import json
import os
import re

import keras
import numpy as np
import tensorflow as tf


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument(
        "--batch-size", type=int, default=16, help="samples per step and replica"
    )
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--port", type=int, default=12345, help="of the first worker on each node"
    )
    parser.add_argument(
        "--save", default="model.weights.h5", help="worker 0 saves the model here"
    )
    return parser.parse_args()


def expand_hostlist(nodelist):
    """Slurm's "gpu[07-09,12],login1" -> gpu07 gpu08 gpu09 gpu12 login1.

    The names `scontrol show hostnames` prints, without needing scontrol.
    """
    hosts = []
    for prefix, ranges in re.findall(r"([^,\[]+)(?:\[([^\]]*)\])?", nodelist):
        if not ranges:
            hosts.append(prefix)
        for part in ranges.split(",") if ranges else []:
            first, _, last = part.partition("-")
            for i in range(int(first), int(last or first) + 1):
                hosts.append(prefix + str(i).zfill(len(first)))  # keeps leading zeros
    return hosts


def tf_config_from_slurm(port):
    """TF_CONFIG for a task srun started: every task of the job step is a worker."""
    hosts = expand_hostlist(os.environ["SLURM_STEP_NODELIST"])
    per_node = int(os.environ["SLURM_STEP_NUM_TASKS"]) // len(hosts)
    workers = [f"{host}:{port + i}" for host in hosts for i in range(per_node)]
    # srun numbers the tasks node by node, in the order of the node list
    return {
        "cluster": {"worker": workers},
        "task": {"type": "worker", "index": int(os.environ["SLURM_PROCID"])},
    }


def make_dataset(n=1024, features=20, classes=4):
    """Random points, labelled by a fixed random linear "teacher"."""
    rng = np.random.default_rng(1234)
    x = rng.standard_normal((n, features)).astype("float32")
    y = (x @ rng.standard_normal((features, classes))).argmax(axis=1)
    return x, y


def make_model(features=20, classes=4):
    return keras.Sequential(
        [
            keras.Input((features,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(classes),
        ]
    )


def main():
    args = parse_args()
    if "TF_CONFIG" not in os.environ and "SLURM_PROCID" in os.environ:
        os.environ["TF_CONFIG"] = json.dumps(tf_config_from_slurm(args.port))
    # Create the strategy first: it reads TF_CONFIG and connects the workers.
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    cluster = strategy.cluster_resolver  # without TF_CONFIG: this machine alone
    chief = (cluster.task_id or 0) == 0  # worker 0 prints and saves
    replicas = strategy.num_replicas_in_sync  # over all workers
    global_batch = args.batch_size * replicas
    workers = len(cluster.cluster_spec().as_dict().get("worker", [])) or 1
    if chief:
        print(
            f"{workers} workers, {replicas} replicas, {global_batch} samples per step"
        )

    keras.utils.set_random_seed(args.seed)  # the same initial variables on every worker
    x, y = make_dataset()
    dataset = (
        tf.data.Dataset.from_tensor_slices((x, y))
        .shuffle(len(x), seed=args.seed)  # the same order on every worker...
        .batch(global_batch, drop_remainder=True)
    )
    options = tf.data.Options()  # ...and each worker takes its share of every batch
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA
    )
    batches = strategy.experimental_distribute_dataset(dataset.with_options(options))

    with strategy.scope():  # variables created here are kept in sync on every replica
        model = make_model()
        optimizer = keras.optimizers.SGD(args.lr, momentum=0.9)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction="none"
    )

    @tf.function
    def train_step(x, y):
        def step(x, y):  # runs on every replica, on its part of the batch
            with tf.GradientTape() as tape:
                per_sample = loss_fn(y, model(x, training=True))
                loss = tf.nn.compute_average_loss(
                    per_sample, global_batch_size=global_batch
                )
            gradients = tape.gradient(loss, model.trainable_variables)
            # apply_gradients() sums the gradients of all replicas first
            optimizer.apply_gradients(zip(gradients, model.trainable_variables))
            return loss

        return strategy.reduce("SUM", strategy.run(step, args=(x, y)), axis=None)

    for epoch in range(args.epochs):
        total, steps = 0.0, 0
        for x_batch, y_batch in batches:
            total += float(train_step(x_batch, y_batch))
            steps += 1
        if chief:
            print(
                f"epoch {epoch + 1}/{args.epochs}  loss {total / steps:.4f}  "
                f"({steps} steps)"
            )

    @tf.function
    def checksums():  # (sum, sum of squares) of every replica's variables
        def local():
            flat = tf.concat(
                [tf.reshape(tf.cast(v, tf.float64), [-1]) for v in model.weights], 0
            )
            return tf.stack([tf.reduce_sum(flat), tf.reduce_sum(flat * flat)])[None]

        return strategy.gather(strategy.run(local), axis=0)

    everyone = checksums().numpy()
    if not (everyone == everyone[0]).all():
        raise RuntimeError(f"the replicas' variables differ: {everyone.tolist()}")
    if chief:
        print(f"final variables identical on all {replicas} replicas")
        model.save_weights(args.save)
        print(f"saved {args.save}")


if __name__ == "__main__":
    main()
