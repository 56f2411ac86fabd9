#!/usr/bin/env bash
# gpu-check.sh: every GPU check for a machine with a GPU and no package manager, from a build
# made elsewhere. Runs the GPU tests (CTest label gpu, else the test binary directly), then a
# training benchmark: onnx-mirror-train (MirroredTrainer, --device cuda) on the CNN, on two GPUs
# when there are two, and on two Transformer encoder layers trained as regressions with
# --loss mse (the reference layer, d_model 8, and models/transformer_d256.onnx, d_model 256,
# sequence 64), and PyTorch (the machine's own torch, when it has one) training the same
# models; prints a summary table. Without a GPU (a dry run) every row says why it did not run.
# GPU tests run as the cuda_tests binary (label gpu in CTest on the build machine).
# Budget: under 8 minutes. Run from the repository root:
#
#   tools/gpu-check.sh BUILD_DIR LIB_DIR
#
# BUILD_DIR holds tools/onnx-mirror-train and tests/cuda/cuda_tests; LIB_DIR is the folder
# shared/device/collect-libs.sh filled. tools/gpu-pack.sh makes both, stripped and compressed
# under the device tool's 64 MiB carry limit:
#
#   tools/gpu-pack.sh build build-gpu                 # here: build-gpu/gpu-bundle.tar.gz
#   mkdir -p /tmp/omt && tar xzf build-gpu/gpu-bundle.tar.gz -C /tmp/omt &&
#     tools/gpu-check.sh /tmp/omt/build /tmp/omt/libs  # there (carry build-gpu)
set -euo pipefail

BUILD=${1:?usage: tools/gpu-check.sh BUILD_DIR LIB_DIR}
LIBS=${2:?usage: tools/gpu-check.sh BUILD_DIR LIB_DIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$(mktemp -d)}
STEPS=${OMT_BENCH_STEPS:-200}
BATCH=${OMT_BENCH_BATCH:-256}
declare -a SUMMARY=()
note() { printf '\n== %s\n' "$*"; }
row() { SUMMARY+=("$(printf '%-44s %s' "$1" "$2")"); }

for f in "$BUILD/tools/onnx-mirror-train" "$BUILD/tests/cuda/cuda_tests"; do
  [[ -x $f ]] || { echo "gpu-check: $f is missing or not executable; build it and carry $BUILD" >&2; exit 2; }
done
ENV_SCRIPT="$ROOT/shared/device/device-env.sh"
[[ -f $ENV_SCRIPT ]] || ENV_SCRIPT="$LIBS/device-env.sh"
[[ -f $ENV_SCRIPT ]] || { echo "gpu-check: device-env.sh not found in shared/device or $LIBS" >&2; exit 2; }
# shellcheck disable=SC1090
source "$ENV_SCRIPT" "$LIBS"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

# ---- 1. GPU tests ---------------------------------------------------------------------------------
note "GPU tests"
TEST_RC=0
# The binary directly: CTest files hold the build machine's absolute paths. The tests read
# models and reference data from this checkout, not from the build machine's.
export OMT_SOURCE_DIR="$ROOT"
timeout 240 "$BUILD/tests/cuda/cuda_tests" --gtest_brief=1 2>&1 | tee "$OUT/gpu-tests.log" || TEST_RC=${PIPESTATUS[0]}
if grep -q "no CUDA device" "$OUT/gpu-tests.log"; then row "GPU tests" "SKIPPED (no CUDA device seen)"
elif [[ $TEST_RC -eq 0 ]]; then row "GPU tests" "PASS"
else row "GPU tests" "FAIL (rc $TEST_RC, see $OUT/gpu-tests.log)"; fi

# ---- 2. benchmark data: synthetic, Fashion-MNIST-shaped and Transformer-shaped (offline machine) --
note "benchmark data"
# 8192 samples (512 of the large Transformer's), reused epoch after epoch: throughput does not
# depend on their number, and the writer below needs no numpy (this machine's python3 may lack it).
PYTHON=$(command -v python3 || command -v /usr/bin/python3)
"$PYTHON" - "$OUT" 8192 512 <<'PY'
import array, random, struct, sys, zipfile
out, n, n_big = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(0)

def npy(typecode, descr, shape, values):
    """One .npy file (format 1.0) holding `values` (little-endian, C order)."""
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, "".join("%d, " % d for d in shape))
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    data = array.array(typecode, values)
    if sys.byteorder != "little":
        data.byteswap()
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data.tobytes()

def npz(path, arrays):
    with zipfile.ZipFile(path, "w") as z:
        for name, blob in arrays.items():
            z.writestr(name + ".npy", blob)

npz(f"{out}/bench.npz", {
    "input": npy("f", "<f4", (n, 1, 28, 28), (rng.random() for _ in range(n * 784))),
    "labels": npy("q", "<i8", (n,), (rng.randrange(10) for _ in range(n)))})
# tests/reference/transformer_op17.onnx: one encoder layer, d_model 8, 2 heads, sequence 5;
# float targets shaped like its output (a regression).
npz(f"{out}/transformer.npz", {
    "input": npy("f", "<f4", (n, 5, 8), (rng.gauss(0, 1) for _ in range(n * 40))),
    "labels": npy("f", "<f4", (n, 5, 8), (rng.gauss(0, 1) for _ in range(n * 40)))})
# models/transformer_d256.onnx: d_model 256, 8 heads, sequence 64. As the PyTorch row below:
# uniform inputs in [0, 1) that are also the targets.
seq = npy("f", "<f4", (n_big, 64, 256), [rng.random() for _ in range(n_big * 64 * 256)])
npz(f"{out}/transformer_d256.npz", {"input": seq, "labels": seq})
print(f"wrote {n} samples each to {out}/bench.npz and {out}/transformer.npz, "
      f"{n_big} to {out}/transformer_d256.npz")
PY

# ---- 3. onnx-mirror on the GPU (MirroredTrainer: train --device cuda) -------------------------------
note "onnx-mirror-train: train --device cuda"
omt_bench() {  # label model data [extra args]: samples/s as fit reports it (median over steps)
  local label=$1 model=$2 data=$3; shift 3
  local rc=0 rate
  timeout 150 "$BUILD/tools/onnx-mirror-train" train "$model" --data "$data" --steps "$STEPS" \
    --global-batch "$BATCH" --optimizer sgd --lr 0.01 --device cuda "$@" >"$OUT/$label.log" 2>&1 || rc=$?
  tail -n 5 "$OUT/$label.log"
  if [[ $rc -ne 0 ]]; then
    row "onnx-mirror $label (GPU)" "FAILED rc $rc: $(grep -m1 -iE 'error|unsupported|not yet' "$OUT/$label.log" | cut -c1-80)"
  else
    rate=$(grep -m1 -oE 'throughput: [0-9]+ samples/s' "$OUT/$label.log" | grep -oE '[0-9]+' || echo '?')
    row "onnx-mirror $label (GPU)" "$rate samples/s (median step)"
  fi
}
GPUS=$( (nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || true) | wc -l)
omt_bench cnn "$ROOT/models/cnn.onnx" "$OUT/bench.npz"
[[ $GPUS -ge 2 ]] && omt_bench cnn_2gpu "$ROOT/models/cnn.onnx" "$OUT/bench.npz" --replicas 2
# The Transformer layers are regressions: float targets [N, seq, d_model], trained with mse.
omt_bench transformer_d8_seq5 "$ROOT/tests/reference/transformer_op17.onnx" "$OUT/transformer.npz" --loss mse
omt_bench transformer_d256_seq64 "$ROOT/models/transformer_d256.onnx" "$OUT/transformer_d256.npz" --loss mse

# ---- 3b. --precision bf16 on this machine's CPU (Note [Math precision]) ---------------------------
# The GPU machines' CPUs may have AVX512-BF16 or AMX, which the development machine lacks: train
# the CNN on the CPU in fp32 and bf16 and compare throughput and the last loss.
note "onnx-mirror-train: train --precision fp32 / bf16 on the CPU"
grep -m1 -oE 'avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ' || true; echo
for precision in fp32 bf16; do
  rc=0
  timeout 120 "$BUILD/tools/onnx-mirror-train" train "$ROOT/models/cnn.onnx" --data "$OUT/bench.npz" --steps 100 \
    --global-batch 256 --optimizer sgd --lr 0.01 --replicas 2 --threads 4 --precision "$precision" \
    >"$OUT/cpu_$precision.log" 2>&1 || rc=$?
  tail -n 3 "$OUT/cpu_$precision.log"
  if [[ $rc -ne 0 ]]; then
    row "onnx-mirror cnn CPU $precision" "FAILED rc $rc: $(grep -m1 -iE 'error|unsupported' "$OUT/cpu_$precision.log" | cut -c1-80)"
  else
    rate=$(grep -m1 -oE 'throughput: [0-9]+ samples/s' "$OUT/cpu_$precision.log" | grep -oE '[0-9]+' || echo '?')
    loss=$(grep -oE 'train loss [0-9.]+' "$OUT/cpu_$precision.log" | tail -1)
    row "onnx-mirror cnn CPU $precision" "$rate samples/s, $loss"
  fi
done

# ---- 4. PyTorch on the same GPU (when this machine's python3 has torch with CUDA) -----------------
note "PyTorch: CNN and Transformer encoder layers"
if python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
timeout 180 python3 - "$STEPS" "$BATCH" <<'PY' 2>&1 | tee "$OUT/torch.log" || true
import sys, time, torch, torch.nn as nn
steps, batch = int(sys.argv[1]), int(sys.argv[2])
dev = torch.device("cuda")
torch.backends.cudnn.benchmark = True

class CNN(nn.Module):  # models/make_models.py
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 32, 3), nn.Conv2d(32, 64, 3)
        self.pool = nn.MaxPool2d(2)
        self.fc1, self.fc2 = nn.Linear(64 * 5 * 5, 128), nn.Linear(128, 10)
    def forward(self, x):
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        return self.fc2(torch.relu(self.fc1(torch.flatten(x, 1))))

def bench(name, model, x, y, loss_fn):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()
    for _ in range(10): step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps): step()
    torch.cuda.synchronize()
    print(f"RESULT {name} {steps * x.shape[0] / (time.perf_counter() - t0):.0f}")

x = torch.rand(batch, 1, 28, 28, device=dev); y = torch.randint(0, 10, (batch,), device=dev)
bench("cnn", CNN().to(dev), x, y, nn.CrossEntropyLoss())
# The same layer as tests/reference/transformer_op17.onnx, then a larger one for scale.
small = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0, batch_first=True).to(dev)
xs = torch.randn(batch, 5, 8, device=dev)
bench("transformer_d8_seq5", small, xs, torch.randn_like(xs), nn.MSELoss())
# models/transformer_d256.onnx has no dropout: neither has this layer.
layer = nn.TransformerEncoderLayer(d_model=256, nhead=8, dim_feedforward=1024, dropout=0.0, batch_first=True).to(dev)
xt = torch.rand(batch, 64, 256, device=dev)
bench("transformer_d256_seq64", layer, xt, xt, nn.MSELoss())
PY
while read -r _ name rate; do row "PyTorch $name (GPU)" "$rate samples/s (timed steps only)"; done < <(grep '^RESULT' "$OUT/torch.log" || true)
else
  row "PyTorch (GPU)" "not run: python3 has no torch with CUDA here"
fi

# ---- summary --------------------------------------------------------------------------------------
note "summary ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo 'GPU'); steps $STEPS, batch $BATCH)"
printf '%s\n' "${SUMMARY[@]}"
rm -f "$OUT"/*.npz  # generated benchmark data (about 100 MB): only the logs are worth keeping
echo "logs: $OUT"
[[ $TEST_RC -eq 0 ]]
