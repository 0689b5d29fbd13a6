# Sourced by tests/run.sh and tests/stress.sh: how many tests run at a time. Sets test_jobs
# (NMT_TEST_JOBS, default: the number of cores) and bats_jobs, the Bats options that run that many
# files at once, each file's tests in order (empty without GNU parallel, which Bats needs for --jobs).
test_jobs=${NMT_TEST_JOBS:-$(nproc)}
bats_jobs=()
if [ "$test_jobs" -gt 1 ] && command -v parallel > /dev/null; then
    bats_jobs=(--jobs "$test_jobs" --no-parallelize-within-files)
fi
