"""model.fit() on several machines: MultiWorkerMirroredStrategy with tf-keras (Keras 2).

Keras 3's fit() fails under MultiWorkerMirroredStrategy in TensorFlow 2.21; tf-keras,
the Keras 2 that TensorFlow keeps for old code, works:
    pip install tf-keras==2.21.0          (the version of your TensorFlow)
Start one worker per node, each with TF_CONFIG set; see tf_multiworker.py.
"""

import argparse
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # before TensorFlow is imported

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

keras = tf.keras  # with TF_USE_LEGACY_KERAS=1, this is tf-keras


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument(
        "--batch-size", type=int, default=16, help="samples per step and replica"
    )
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


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
    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # first: it reads TF_CONFIG
    chief = strategy.cluster_resolver.task_id == 0
    global_batch = args.batch_size * strategy.num_replicas_in_sync

    keras.utils.set_random_seed(args.seed)
    x, y = make_dataset()
    # fit() shards a tf.data.Dataset between the workers: each takes part of a batch.
    dataset = (
        tf.data.Dataset.from_tensor_slices((x, y))
        .shuffle(len(x), seed=args.seed)
        .batch(global_batch, drop_remainder=True)
    )
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA
    )
    with strategy.scope():
        model = make_model()
        model.compile(
            optimizer=keras.optimizers.SGD(args.lr, momentum=0.9),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    if chief:  # tf_keras with TF_USE_LEGACY_KERAS=1, keras (Keras 3) without
        print(
            f"a {type(model).__module__.split('.')[0]} model on "
            f"{strategy.num_replicas_in_sync} replicas"
        )
    history = model.fit(dataset.with_options(options), epochs=args.epochs, verbose=0)
    if chief:
        for epoch, (loss, accuracy) in enumerate(
            zip(history.history["loss"], history.history["accuracy"])
        ):
            print(
                f"epoch {epoch + 1}/{args.epochs}  loss {loss:.4f}  "
                f"accuracy {accuracy:.1%}"
            )


if __name__ == "__main__":
    main()
