#!/usr/bin/env bash
# Build Horovod 0.28.1 for the PyTorch in the active Python environment and install it.
# The release asks its compiler for C++14; PyTorch 2's headers need C++17.
# The wheel is kept in WHEEL_DIR: later installs (other venvs, other jobs) take seconds.
set -euo pipefail

PYTHON=${PYTHON:-python}
VERSION=0.28.1
TORCH=$("$PYTHON" -c "import torch; print(torch.__version__.split('+')[0])")
WHEEL_DIR=$(realpath -m "${WHEEL_DIR:-$HOME/.cache/horovod-wheels/torch-$TORCH}")

if ! compgen -G "$WHEEL_DIR/horovod-$VERSION-*.whl" >/dev/null; then
    src=$(mktemp -d)
    trap 'rm -rf "$src"' EXIT
    "$PYTHON" -m pip download --no-deps --no-binary :all: "horovod==$VERSION" -d "$src"
    tar -xzf "$src/horovod-$VERSION.tar.gz" -C "$src"
    tree="$src/horovod-$VERSION"
    sed -i 's/CMAKE_CXX_STANDARD 14/CMAKE_CXX_STANDARD 17/' \
        "$tree/CMakeLists.txt" "$tree/horovod/torch/CMakeLists.txt"
    "$PYTHON" -m pip install setuptools wheel    # --no-build-isolation needs them
    HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 \
    HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
        "$PYTHON" -m pip wheel --no-build-isolation --no-deps -w "$WHEEL_DIR" "$tree"
fi
"$PYTHON" -m pip install "$WHEEL_DIR/horovod-$VERSION-"*.whl
