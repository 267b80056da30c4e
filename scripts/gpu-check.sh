#!/usr/bin/env bash
# scripts/gpu-check.sh - the GPU check of issue 15 in one run, for a short
# lease of a GPU machine (an NVIDIA H200 with CUDA 13, cuBLAS, PyTorch,
# transformers and peft): configure and build with CUDA, run the GPU tests
# (`ctest -L gpu`: the kernels, the pass, the cross-device resume and the
# pass against transformers + peft) and the trainer's unit tests, the GPU bench (`alallo
# bench train --device cuda`: the peak, then the trainer at the 124m and 1b
# shapes, LoRA 16-bit, QLoRA and full, batch 4 x 2048), the service end to
# end on the GPU (tests/integration/gpu_e2e.test.mjs, where node is there)
# and the PyTorch reference (bench/train/torch_gpu_ref.py), each under its
# own `timeout`, then one summary, which ends with the figures set against
# the issue's targets (bench/train/gpu_targets.py). The whole run stays under 8 minutes (450 s of limits in all), so a lease of 15 fits two.
#
# Usage: scripts/gpu-check.sh          the check (on a machine without a GPU:
#                                      the CUDA build alone, a compile check,
#                                      then exit 0)
#        scripts/gpu-check.sh --pack   here, on Debian 12 with its archive:
#                                      fetch the Debian packages the build
#                                      needs into .gpudeps/ (git-ignored),
#                                      for a GPU machine that has none of them
#
# On a slow machine (a compile check on 2 shared cores) give the build more
# time: GPU_CHECK_BUILD_S (default 200) and GPU_CHECK_LIMIT_S (the whole
# run's, default 450).
#
# GPU_CHECK_PARTS picks what runs after the build, in this order (default:
# all but train-unit, which CI runs on the CPU build):
#   tests         ctest -L gpu: the kernels and the pass against the CPU (90 s)
#   resume-torch  the cross-device resume and the pass against PyTorch (120 s)
#   bench         the peak, then the trainer at 124m and 1b, then 1b 16-bit
#                 LoRA with LoRA's products apart (ALALLO_CUDA_LORA=each),
#                 124m full on the fp32 attention kernels, and a short 124m
#                 pass with CUDA graphs off and on (two rounds), as time
#                 allows (GPU_CHECK_BENCH_S, 120 s)
#   torch-ref     bench/train/torch_gpu_ref.py, what is left of the run
#   e2e           tests/integration/gpu_e2e.test.mjs, where node is (90 s)
#   train-unit    the trainer's CPU unit tests on this build (120 s)
#   kernels       bench/gpu/run.sh and ops_run.sh: each kernel timed at the
#                 1B shapes, for bench/train/gpu_model.py's per-kernel
#                 prediction (kernels.json; 90 s each; not by default)
#   racecheck     compute-sanitizer --tool racecheck on the attention and
#                 ops tests: shared-memory races on the GPU itself (120 s
#                 each; not by default)
# e.g. a second run on a machine still warm, its build kept:
#   GPU_CHECK_PARTS="bench torch-ref" scripts/gpu-check.sh
#   GPU_CHECK_PARTS="kernels racecheck" scripts/gpu-check.sh
#
# Output: everything goes to $OUT when it is set (the device tool's output
# folder, of which at most 8 files come back), else to build-gpu/check/:
# env.txt (the machine, written first: scripts/gpu-env.sh), summary.txt,
# build.log, ctest.log, bench.json, torch.json, torch.log, kernels.json.
# The summary ends with gpu_model.py's prediction for the GPU it found, to
# set beside the measured figures.
# The build has no -Werror (GPU_CHECK_WERROR=1 asks for it): the GPU
# machine's compilers may be newer than Debian's.
# Exit status: 0 when every part that ran passed (or, without a GPU, the
# build did), 1 otherwise.
#
# The GPU machine's image has nvcc, CMake and PyTorch but maybe not the C
# packages alallo links (jansson, SQLite, libpq, libmicrohttpd, curl, PCRE2,
# libsodium, OpenBLAS, cmocka) and no package archive. When pkg-config
# misses any of them and .gpudeps/ holds packages (from --pack; carry
# .gpudeps with the run), they are unpacked under /tmp/alallo-gpudeps and
# the build and the tests are pointed there (PKG_CONFIG_SYSROOT_DIR,
# LD_LIBRARY_PATH). Debian 12's libraries need glibc 2.36 or later.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1

# --- --pack: the Debian packages, with what they need beyond a base system.
# The -dev packages of CMakeLists.txt's pkg_check_modules, pkgconf itself,
# and every library they depend on except the C runtime and the compiler's
# own (libgomp: the GPU machine's gcc links its own), and OpenBLAS's
# OpenMP and serial variants (only the pthread one is linked).
if [[ ${1:-} == --pack ]]; then
  wanted=(libjansson-dev libsqlite3-dev libpq-dev libmicrohttpd-dev libcurl4-openssl-dev
          libpcre2-dev libsodium-dev libopenblas-dev libopenblas-pthread-dev libcmocka-dev
          pkgconf libpkgconf3)
  keep_out='^(libopenblas0-openmp|libopenblas0-serial|libgomp1|libc6|libc6-dev|libgcc-s1|libstdc\+\+6|gcc-.*-base|libcrypt1|libcrypt-dev|zlib1g|debconf|dpkg|perl-base|tar|coreutils|.*-dev-bin|linux-libc-dev|libnsl.*|rpcsvc-proto|libtirpc.*)$'
  mapfile -t closure < <(apt-cache depends --recurse --no-recommends --no-suggests \
      --no-conflicts --no-breaks --no-replaces --no-enhances "${wanted[@]}" |
    grep -v '^ \|^<' | sort -u)
  pkgs=()
  for p in "${closure[@]}"; do
    [[ $p =~ $keep_out ]] && continue
    # -dev packages only where named: the headers alallo includes.
    if [[ $p == *-dev ]] && ! printf '%s\n' "${wanted[@]}" | grep -qxF "$p"; then continue; fi
    pkgs+=("$p")
  done
  rm -rf .gpudeps && mkdir -p .gpudeps
  (cd .gpudeps && apt-get download "${pkgs[@]}") || exit 1
  echo "gpu-check: ${#pkgs[@]} packages, $(du -sh .gpudeps | cut -f1) in .gpudeps/" \
       "(carry .gpudeps with the run)"
  exit 0
fi

out=${OUT:-$root/build-gpu/check}
build=$root/build-gpu
mkdir -p "$out" "$build"
summary=$out/summary.txt
: >"$summary"
say() { echo "gpu-check: $*" | tee -a "$summary"; }
t_start=$SECONDS
failed=0
# part NAME SECONDS LOG CMD...: runs CMD under timeout, its output appended
# to LOG, and records the outcome in the summary.
# Each part gets its own limit, cut to what is left of the whole run's
# (GPU_CHECK_LIMIT_S, default 450 s), so the run ends inside 8 minutes.
deadline=$((t_start + ${GPU_CHECK_LIMIT_S:-450}))
part() {
  local name=$1 limit=$2 log=$3 t0=$SECONDS rc left=$((deadline - SECONDS))
  shift 3
  ((left < limit)) && limit=$left
  if ((limit < 5)); then
    failed=1
    say "$name: NOT RUN, no time left of the run's ${GPU_CHECK_LIMIT_S:-450} s"
    return 1
  fi
  [[ $log == *.json ]] || echo "=== $name: $*" >>"$log"
  timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1
  rc=$?
  if ((rc == 0)); then
    say "$name: ok ($((SECONDS - t0)) s)"
  else
    failed=1
    if ((rc == 124 || rc == 137)); then
      say "$name: TIMED OUT after $limit s (log: $(basename "$log"))"
    else
      say "$name: FAILED, exit $rc ($((SECONDS - t0)) s; log: $(basename "$log"))"
    fi
  fi
  return $rc
}
# want PART: whether GPU_CHECK_PARTS asks for it.
parts=" ${GPU_CHECK_PARTS:-tests resume-torch bench torch-ref e2e} "
want() { [[ $parts == *" $1 "* ]]; }

# --- the machine first (env.txt: GPU, driver, nvcc, compilers, cuBLAS,
# cuBLASLt and cuDNN found or not, PyTorch), before anything can fail
nvcc=""
if [[ -x /usr/local/cuda/bin/nvcc ]]; then nvcc=/usr/local/cuda/bin/nvcc
elif command -v nvcc >/dev/null; then nvcc=$(command -v nvcc); fi
LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-} scripts/gpu-env.sh "$nvcc" >"$out/env.txt" 2>&1
say "environment: env.txt ($(grep -c '' "$out/env.txt") lines;" \
    "$(grep -E '^lib(cublasLt|cudnn):' "$out/env.txt" | sed 's/: not found/ missing/; s/: .*/ found/' |
       tr '\n' ' ')$(grep -E '^cudnn_version.h' "$out/env.txt" | sed 's/.*: /cuDNN /'))"

# --- the compiler and the GPU
if [[ -z $nvcc ]]; then
  say "no nvcc (neither /usr/local/cuda/bin/nvcc nor on PATH): nothing to check"
  exit 1
fi
gpu=""
if command -v nvidia-smi >/dev/null; then
  gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null |
        head -1)
fi
say "machine: $(nproc) CPUs; nvcc $("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p');" \
    "GPU: ${gpu:-none visible}"

# --- the C packages, from .gpudeps/ when the machine lacks them
mods=(jansson sqlite3 libpq libmicrohttpd libcurl libpcre2-8 libsodium openblas cmocka)
orig_ld=${LD_LIBRARY_PATH:-} # PyTorch runs with the machine's own libraries
# GPU_CHECK_GPUDEPS=1 takes .gpudeps/ even where pkg-config finds everything
# (to try the unpacking on a machine that has the packages).
if [[ ${GPU_CHECK_GPUDEPS:-} == 1 ]] || ! command -v pkg-config >/dev/null ||
   ! pkg-config --exists "${mods[@]}" 2>/dev/null; then
  if compgen -G ".gpudeps/*.deb" >/dev/null; then
    deps=/tmp/alallo-gpudeps
    rm -rf "$deps" && mkdir -p "$deps"
    for f in .gpudeps/*.deb; do
      if command -v dpkg-deb >/dev/null; then
        dpkg-deb -x "$f" "$deps"
      else # a .deb is an ar archive around data.tar.*
        m=$(ar t "$f" | grep -m1 '^data\.tar')
        (cd "$deps" && ar x "$root/$f" "$m" && tar -xf "$m" && rm -f "$m")
      fi
    done
    multi=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
    # A library the machine has already (libssl, libffi ...) stays the
    # machine's: its copy here is removed, so LD_LIBRARY_PATH only adds what
    # is missing and never shadows what PyTorch or python3 load. alallo's
    # own packages' libraries stay (their -dev links point at them).
    have=$(ldconfig -p 2>/dev/null | awk '{print $1}')
    for f in "$deps"/usr/lib/"$multi"/lib*.so.*; do
      name=$(basename "$f")
      [[ $name =~ ^lib(jansson|sqlite3|pq|microhttpd|curl|pcre2|sodium|openblas|cmocka|pkgconf) ]] &&
        continue
      grep -qxF "$name" <<<"$have" && rm -f "$f"
    done
    libdirs=$deps/usr/lib/$multi:$deps/usr/lib/$multi/openblas-pthread:$deps/usr/lib
    export PKG_CONFIG_SYSROOT_DIR=$deps
    export PKG_CONFIG_LIBDIR=$deps/usr/lib/$multi/pkgconfig:$deps/usr/lib/$multi/openblas-pthread/pkgconfig:$deps/usr/share/pkgconfig
    export LD_LIBRARY_PATH=$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export LIBRARY_PATH=$libdirs${LIBRARY_PATH:+:$LIBRARY_PATH}
    export PKG_CONFIG=$deps/usr/bin/pkgconf # CMake's FindPkgConfig takes it from here
    # The packages' Requires.private (libpq's libssl, libmicrohttpd's
    # gnutls ...) are for static links only: an empty stand-in each, so
    # that pkgconf finds them without their -dev packages.
    mkdir -p "$deps/stub-pc"
    PKG_CONFIG_LIBDIR=$PKG_CONFIG_LIBDIR:$deps/stub-pc
    for _ in 1 2 3 4 5 6 7 8; do
      missing=$("$PKG_CONFIG" --cflags --libs "${mods[@]}" 2>&1 >/dev/null |
                sed -n "s/^Package '\([^']*\)', required by .*/\1/p" | sort -u)
      [[ -z $missing ]] && break
      for m in $missing; do
        printf 'Name: %s\nDescription: stand-in (scripts/gpu-check.sh)\nVersion: 999\n' "$m" \
          >"$deps/stub-pc/$m.pc"
      done
    done
    say "C packages: unpacked $(ls .gpudeps/*.deb | wc -l) from .gpudeps/ into $deps"
  else
    say "C packages: pkg-config misses some of ${mods[*]} and there is no .gpudeps/" \
        "(run scripts/gpu-check.sh --pack where Debian's archive is, and carry .gpudeps)"
  fi
fi

# --- build
jobs=$(nproc)
((jobs > 16)) && jobs=16
# No -Werror here: the GPU machine's gcc and nvcc may be newer than
# Debian's and warn where these do not; CI's build (make test) keeps
# warnings as errors, and the summary counts the device's warnings.
# GPU_CHECK_WERROR=1 turns it back on.
werror=OFF
[[ ${GPU_CHECK_WERROR:-0} == 1 ]] && werror=ON
part configure 60 "$out/build.log" cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DALALLO_CUDA=ON -DALALLO_WERROR=$werror -DCMAKE_CUDA_COMPILER="$nvcc" || { say "summary: FAILED ($((SECONDS - t_start)) s)"; exit 1; }
part build "${GPU_CHECK_BUILD_S:-200}" "$out/build.log" cmake --build "$build" -j "$jobs" ||
  { tail -30 "$out/build.log" | grep -i -m 10 "error" | tee -a "$summary"; say "summary: FAILED ($((SECONDS - t_start)) s)"; exit 1; }
warnings=$(grep -c -i 'warning' "$out/build.log")
((warnings)) && say "build: $warnings lines of compiler warnings (not errors here; build.log)"

if [[ -z $gpu ]] || [[ $("$build/alallo" bench train --device cuda --size 256 2>&1) == *"no GPU is visible"* ]]; then
  say "no GPU visible: the CUDA build compiled and linked; the GPU tests, the bench and the" \
      "PyTorch reference need a GPU (skipped)"
  say "summary: compile check passed ($((SECONDS - t_start)) s)"
  exit 0
fi

# --- tests: the GPU's, then the trainer's unit tests on this build
# The two that drive processes (the cross-device resume: 12 short `alallo
# train` runs; PyTorch + transformers + peft: 4 GPU dumps, then one python
# run that imports them once) get their own part, so the kernels' tests keep their 90 s. PyTorch
# runs with the machine's own libraries (orig_ld), as torch-ref does.
want tests && part gpu-tests 90 "$out/ctest.log" bash -c "cd '$build' && ctest -L gpu -E 'test_cuda_(resume|torch)' --output-on-failure --timeout 85"
want resume-torch && part gpu-resume-torch 120 "$out/ctest.log" bash -c "cd '$build' && ALALLO_PYTHON=\"env LD_LIBRARY_PATH='$orig_ld' PYTHONUNBUFFERED=1 python3\" ctest -R 'gpu/test_cuda_(resume|torch)' --output-on-failure --timeout 115"
want train-unit && part train-unit-tests 120 "$out/ctest.log" bash -c "cd '$build' && ctest -R '^train/' -j 8 --output-on-failure --timeout 115"
grep -E "tests passed|tests failed|Skipped|\(Failed\)|\(Timeout\)" "$out/ctest.log" | tee -a "$summary"

# --- the kernels alone (bench/gpu/: one JSON line a kernel), and the GPU's
# own race check of the kernels with shared memory
if want kernels; then
  part kernels-attention 90 "$out/kernels.json" bench/gpu/run.sh 10
  part kernels-ops 90 "$out/kernels.json" bench/gpu/ops_run.sh 10
fi
if want racecheck; then
  sanitizer=$(dirname "$nvcc")/compute-sanitizer
  [[ -x $sanitizer ]] || sanitizer=$(command -v compute-sanitizer || true)
  if [[ -n $sanitizer ]]; then
    for t in test_cuda_attn test_cuda_ops; do
      part "racecheck-$t" 120 "$out/ctest.log" "$sanitizer" --tool racecheck --error-exitcode 1 \
        "$build/gpu_$t"
    done
  else
    say "racecheck: NOT RUN, no compute-sanitizer beside $nvcc or on PATH"
  fi
fi

# --- the GPU bench and the PyTorch reference (JSON on stdout, notes on stderr)
if want bench; then
part bench 45 "$out/bench.json" "$build/alallo" bench train --device cuda
# the GPU trainer at the issue's shapes, one JSON line each, appended to
# bench.json (GPU_CHECK_BENCH_S in all, default 120; 1b runs after 124m)
bench_end=$((SECONDS + ${GPU_CHECK_BENCH_S:-120}))
for shape in 124m 1b; do
  for run in "16-bit lora" "4-bit lora" "16-bit full"; do
    set -- $run
    left=$((bench_end - SECONDS))
    ((left > 10)) || { say "bench $shape $1 $2: no time left (skipped)"; continue; }
    part "bench-$shape-$1-$2" "$left" "$out/bench.json" "$build/alallo" bench train \
      --device cuda --shape "$shape" --precision "$1" --adapter "$2" --batch 4 --seq 2048 --steps 5
  done
done
# what folding LoRA into the base products buys: 1b LoRA 16-bit again with
# LoRA's products apart ("lora":"each" in its line), when time is left
left=$((bench_end - SECONDS))
if ((left > 30)); then
  part "bench-1b-16-bit-lora-each" "$left" "$out/bench.json" env ALALLO_CUDA_LORA=each \
    "$build/alallo" bench train --device cuda --shape 1b --precision 16-bit --adapter lora \
    --batch 4 --seq 2048 --steps 5
else
  say "bench 1b 16-bit LoRA, products apart: no time left (skipped)"
fi
# what the tensor-core attention buys: 124m full again on the fp32
# reference kernels ("attention":"fp32" in its line), when time is left
left=$((bench_end - SECONDS))
if ((left > 30)); then
  part "bench-124m-full-fp32-attention" "$left" "$out/bench.json" env ALALLO_CUDA_ATTENTION=fp32 \
    "$build/alallo" bench train --device cuda --shape 124m --precision 16-bit --adapter full \
    --batch 4 --seq 2048 --steps 5
else
  say "bench 124m full, fp32 attention: no time left (skipped)"
fi
# what CUDA graphs buy where launches count: 124m 16-bit LoRA on a short
# pass (1 x 256 tokens), graphs off and on in alternating rounds (each
# line's "graphs": replayed 0 when off; walk_s the host's price)
for round in 1 2; do
  for g in off on; do
    left=$((bench_end - SECONDS))
    if ((left > 20)); then
      part "bench-124m-short-graphs-$g-$round" "$left" "$out/bench.json" \
        env ALALLO_CUDA_GRAPHS=$g "$build/alallo" bench train --device cuda --shape 124m \
        --precision 16-bit --adapter lora --batch 1 --seq 256 --steps 30
    else
      say "bench 124m short pass, graphs $g (round $round): no time left (skipped)"
    fi
  done
done
fi

# --- the PyTorch reference: PyTorch + peft at the same shapes
if want torch-ref; then
reserve=25 # the summary; and the e2e test's 90 s when it will run
want e2e && command -v node >/dev/null && reserve=115
left=$((deadline - SECONDS - reserve))
part torch-ref 150 "$out/torch.json" bash -c \
  "LD_LIBRARY_PATH='$orig_ld' PYTHONUNBUFFERED=1 python3 bench/train/torch_gpu_ref.py --budget-s $((left > 10 ? left : 10)) 2>>'$out/torch.log'"
fi

# --- the service end to end on the GPU (tests/integration/gpu_e2e.test.mjs):
# a GPU worker plans, runs and bills a tiny job. It needs node (18 or later),
# which a GPU machine's image may lack (no package archive to install it
# from there): then it is not run, and the summary says so, without failing.
if ! want e2e; then
  :
elif command -v node >/dev/null; then
  part gpu-e2e 90 "$out/ctest.log" env ALALLO_BIN="$build/alallo" ALALLO_ROOT="$root" \
    node --test --test-concurrency=1 tests/integration/gpu_e2e.test.mjs
  grep -E "^# (pass|fail|skipped) [1-9]|# SKIP" "$out/ctest.log" | tee -a "$summary"
else
  say "gpu-e2e: NOT RUN, no node on this machine (tests/integration/gpu_e2e.test.mjs needs it)"
fi

# the figures against issue 15's targets (bench/train/gpu_targets.py)
if want bench; then
  python3 bench/train/gpu_targets.py "$out/bench.json" "$out/torch.json" | tee -a "$summary"
fi

# what bench/train/gpu_model.py predicted for this GPU, to set beside them
model_gpu=H200
[[ $gpu == *H100* ]] && model_gpu=H100
{ echo "predicted by bench/train/gpu_model.py --gpu $model_gpu (1b, batch 4 x 2048):"
  python3 bench/train/gpu_model.py --gpu "$model_gpu" |
    grep -E '^==|PyTorch|current design|every change built|all five'; } | tee -a "$summary"

if ((failed)); then
  say "summary: FAILED ($((SECONDS - t_start)) s); logs in $out"
  exit 1
fi
say "summary: all passed ($((SECONDS - t_start)) s); logs in $out"
exit 0
