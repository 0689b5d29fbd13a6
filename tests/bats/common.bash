# Loaded by every suite (`load common`): a failing stage of a pipeline fails the pipeline, so a
# check fed by a pipeline or a process substitution's producer sees the failure; helpers.
set -o pipefail

# Runs a command that must fail (status not 0); a test line `fails cmd` fails the test when cmd
# succeeds, where a `! cmd` line before the test's end would not (set -e ignores `!`).
fails() {
    if "$@"; then
        echo "expected to fail: $*" >&2
        return 1
    fi
}
