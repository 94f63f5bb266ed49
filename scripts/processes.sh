# Sourced by the scripts that start servers of their own (benches,
# measurements): a scratch folder `$work`, the list `$pids` they add every
# process they start to, and on exit every one of them stopped and the
# folder removed.
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
