#!/usr/bin/env bash
# Build Horovod 0.28.1 for the PyTorch in the active Python environment and install it.
# The release asks its compiler for C++14; PyTorch 2's headers need C++17.
# With a CUDA (or ROCm) build of PyTorch, Horovod sends GPU tensors through NCCL (RCCL).
# The wheel is kept in WHEEL_DIR, one per build of PyTorch (2.13.0+cpu,
# 2.13.0+cu128...): later installs (other venvs, other jobs) take seconds.
set -euo pipefail

PYTHON=${PYTHON:-python}
VERSION=0.28.1
read -r TORCH CUDA ROCM < <("$PYTHON" -c \
    "import torch; print(torch.__version__, torch.version.cuda, torch.version.hip)")
WHEEL_DIR=$(realpath -m "${WHEEL_DIR:-$HOME/.cache/horovod-wheels/torch-$TORCH}")

build=(HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1
       HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1)
if [ "$CUDA" != None ]; then      # needs CUDA's nvcc and NCCL's headers (module load)
    build+=(HOROVOD_GPU=CUDA HOROVOD_GPU_OPERATIONS=NCCL)
elif [ "$ROCM" != None ]; then    # needs ROCm's hipcc and RCCL
    build+=(HOROVOD_GPU=ROCM HOROVOD_GPU_OPERATIONS=NCCL)
fi
echo "Horovod $VERSION for torch $TORCH: ${build[*]}"
echo "wheel kept in $WHEEL_DIR"

if ! compgen -G "$WHEEL_DIR/horovod-$VERSION-*.whl" >/dev/null; then
    src=$(mktemp -d)
    trap 'rm -rf "$src"' EXIT
    "$PYTHON" -m pip download --no-deps --no-binary :all: "horovod==$VERSION" -d "$src"
    tar -xzf "$src/horovod-$VERSION.tar.gz" -C "$src"
    tree="$src/horovod-$VERSION"
    sed -i 's/CMAKE_CXX_STANDARD 14/CMAKE_CXX_STANDARD 17/' \
        "$tree/CMakeLists.txt" "$tree/horovod/torch/CMakeLists.txt"
    "$PYTHON" -m pip install setuptools wheel    # --no-build-isolation needs them
    env "${build[@]}" \
        "$PYTHON" -m pip wheel --no-build-isolation --no-deps -w "$WHEEL_DIR" "$tree"
fi
"$PYTHON" -m pip install "$WHEEL_DIR/horovod-$VERSION-"*.whl
