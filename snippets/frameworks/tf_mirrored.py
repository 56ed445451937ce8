"""Train a small Keras classifier on all the GPUs of one machine with MirroredStrategy.

    python tf_mirrored.py
One process drives every GPU it sees, one replica per GPU; without GPUs, two replicas
on the CPU. When GPUs were expected (--expect-gpus, or CUDA_VISIBLE_DEVICES names some,
as Slurm sets it for a job given GPUs) and TensorFlow sees none, it stops.
"""

import argparse
import os
import sys

import keras
import numpy as np
import tensorflow as tf


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument(
        "--batch-size", type=int, default=32, help="samples per step, all replicas"
    )
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save", default="model.weights.h5")
    parser.add_argument("--expect-gpus", action="store_true",
                        help="stop if TensorFlow sees no GPU")
    return parser.parse_args()


def gpus_expected(args):
    """--expect-gpus, or CUDA_VISIBLE_DEVICES names GPUs ("" and "-1" hide them all)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return args.expect_gpus or visible not in ("", "-1", "NoDevFiles")


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
    gpus = tf.config.list_physical_devices("GPU")
    print(f"TensorFlow {tf.__version__} sees {len(gpus)} GPU(s)")
    if not gpus and gpus_expected(args):
        why = (
            "--expect-gpus"
            if args.expect_gpus
            else f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']}"
        )
        sys.exit(
            f"GPUs were expected ({why}) but TensorFlow sees none: "
            "install it with pip install 'tensorflow[and-cuda]'"
        )
    if not gpus:
        # No GPU: split the CPU into two logical devices, two replicas to mirror.
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2
        )
    strategy = tf.distribute.MirroredStrategy()  # one replica per GPU of this machine
    print(
        f"{strategy.num_replicas_in_sync} replicas on "
        f"{', '.join(d.split('device:')[-1] for d in strategy.extended.worker_devices)}"
    )

    keras.utils.set_random_seed(args.seed)
    x, y = make_dataset()
    with strategy.scope():  # variables created here get a copy on every replica
        model = make_model()
        model.compile(
            optimizer=keras.optimizers.SGD(args.lr, momentum=0.9),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    # fit() splits each batch between the replicas and sums their gradients every step.
    history = model.fit(x, y, batch_size=args.batch_size, epochs=args.epochs, verbose=0)
    for epoch, (loss, accuracy) in enumerate(
        zip(history.history["loss"], history.history["accuracy"])
    ):
        print(
            f"epoch {epoch + 1}/{args.epochs}  loss {loss:.4f}  accuracy {accuracy:.1%}"
        )

    for weight in model.weights:  # every replica's copy of every variable is the same
        copies = strategy.experimental_local_results(weight.value)
        if not all(np.array_equal(copy, copies[0]) for copy in copies):
            raise RuntimeError(f"the replicas' copies of {weight.path} differ")
    print(f"final variables identical on all {strategy.num_replicas_in_sync} replicas")
    model.save_weights(args.save)
    print(f"saved {args.save}")


if __name__ == "__main__":
    main()
