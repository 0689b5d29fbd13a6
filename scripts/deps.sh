#!/usr/bin/env bash
# Installs the Debian packages nmt needs, only those missing, and says what it does.
# Run as root (or with sudo available). Set NMT_NO_DEPS=1 to skip.
set -eu
[ "${NMT_NO_DEPS:-0}" = 1 ] && exit 0
# package: why
pkgs=(
  build-essential    # cc, make
  clang              # libFuzzer for the fuzz targets
  libclang-rt-dev    # clang's sanitizer and fuzzer runtimes
  libzstd-dev        # record stream frames
  zstd               # the zstd CLI, used in tests to read streams as plain zstd
  libcsv-dev         # TSV/CSV input and CSV logs
  libopenblas-dev    # sgemm for the cpu backend
  libutf8proc-dev    # Unicode normalisation, case mapping and categories
  libmicrohttpd-dev  # nmt-serve's HTTP server (no hand-written HTTP parser)
  libjansson-dev     # nmt-serve's JSON requests and answers (no hand-written JSON parser)
  libcurl4-openssl-dev  # nmt-serve --client's HTTP requests (no hand-written HTTP client)
  chromium chromium-driver  # the test of nmt-serve's page in a headless browser, driven over WebDriver
  bats               # command-line tests
  sentencepiece      # spm_encode/spm_decode: the tests compare nmt-vocab --type unigram's models with them
  parallel           # GNU parallel: Bats runs its files side by side with it (--jobs)
  valgrind           # memory checks of the tools
  man-db groff-base  # man -l to render and check the man pages
  python3            # test helpers
  curl               # the tests' HTTP requests to nmt-serve
  openmpi-bin libopenmpi-dev  # mpirun and the MPI communication module (several ranks)
  gnuplot-nox        # pictures of training curves (pipelines/plot.sh)
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all packages present"
  exit 0
fi
echo "deps: installing ${missing[*]}"
SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
