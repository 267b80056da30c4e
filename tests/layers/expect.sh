# tests/layers/expect.sh - what the self-tests of the include checks share
# (sourced by test_check_layers.sh and test_check_circles.sh): a count of
# checks passed and failed, and `expect`, which judges one run of a check.

passed=0
failed=0

pass() { echo "ok   - $1"; passed=$((passed + 1)); }
fail() {
    echo "FAIL - $1"
    [ -n "${2:-}" ] && sed 's/^/       | /' <<<"$2"
    failed=$((failed + 1))
}

# expect NAME WANT_RC OUTPUT RC [TEXT...]: the exit status and each TEXT
# (a fixed string) in the output.
expect() {
    local name=$1 want=$2 out=$3 rc=$4 t
    shift 4
    if [ "$rc" -ne "$want" ]; then
        fail "$name: exit status $rc, expected $want" "$out"
        return
    fi
    for t in "$@"; do
        if ! grep -qF -- "$t" <<<"$out"; then
            fail "$name: the output lacks \"$t\"" "$out"
            return
        fi
    done
    pass "$name"
}
