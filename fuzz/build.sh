#!/bin/sh
# fuzz/build.sh - configures and builds the libFuzzer targets of fuzz/ with
# clang into build-fuzz/ (or $FUZZ_BUILD). Usage: fuzz/build.sh [TARGET...]
# Needs clang 14 and its libFuzzer runtime (Debian: clang-14,
# libclang-rt-14-dev); it says so and exits 1 when they are missing.
set -eu
cd "$(dirname "$0")/.."
BUILD=${FUZZ_BUILD:-build-fuzz}
CC_FUZZ=${CC_FUZZ:-}
if [ -z "$CC_FUZZ" ]; then
    for c in clang-14 clang; do
        if command -v "$c" >/dev/null 2>&1; then CC_FUZZ=$c; break; fi
    done
fi
if [ -z "$CC_FUZZ" ]; then
    echo "fuzz/build.sh: clang not found (apt-get install clang-14 libclang-rt-14-dev)" >&2
    exit 1
fi
# libFuzzer's runtime ships separately from the compiler on Debian.
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n);\nint LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' >"$probe/p.c"
if ! "$CC_FUZZ" -fsanitize=fuzzer "$probe/p.c" -o "$probe/p" 2>/dev/null; then
    echo "fuzz/build.sh: $CC_FUZZ cannot link -fsanitize=fuzzer (apt-get install libclang-rt-14-dev)" >&2
    exit 1
fi
# Configuring again is cheap and picks up targets added to CMakeLists.txt.
if [ -f "$BUILD/CMakeCache.txt" ]; then
    cmake -S fuzz -B "$BUILD" >/dev/null
else
    cmake -S fuzz -B "$BUILD" -DCMAKE_C_COMPILER="$CC_FUZZ" -DCMAKE_BUILD_TYPE=None >/dev/null
fi
if [ $# -gt 0 ]; then
    for t in "$@"; do cmake --build "$BUILD" -j "${JOBS:-2}" --target "$t"; done
else
    cmake --build "$BUILD" -j "${JOBS:-2}"
fi
