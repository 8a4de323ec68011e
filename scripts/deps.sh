#!/bin/sh
# deps.sh — installs the Debian packages sluice needs that are missing.
#
#   scripts/deps.sh [GROUP...]     GROUP: build (default), bench, bench-server, fuzz,
#                                  test (the integration tests' peers)
#
# The test group also installs the npm packages pinned in tests/clients (the
# Redis client libraries) and tests/ui (puppeteer-core for the page's browser
# tests), each by its package-lock.json with `npm ci`, when node_modules is
# missing or older than the lock file. The browser is Debian's chromium,
# never a download.
#
# Idempotent: checks each package with dpkg first and installs only what is
# missing, in one apt-get call. Without root it says what to run instead and
# fails, so `make check` never half-works on a machine that lacks a package.
set -eu

build="gcc make binutils libc6-dev libsodium-dev libcmocka-dev libh2o-evloop-dev libssl-dev libyaml-dev libjansson-dev libhiredis-dev libglib2.0-dev libxml2-utils libnghttp2-dev libprotobuf-c-dev protobuf-c-compiler"
bench="golang-go golang-golang-x-time-dev"
bench_server="redis-server redis-tools nginx wrk nghttp2-client valgrind"
fuzz="clang libclang-rt-dev"
test="python3 curl golang-go redis-server redis-tools nginx wrk pkgconf groff-base nodejs npm python3-redis chromium python3-grpcio python3-protobuf protobuf-compiler prometheus systemd iproute2"

[ $# -gt 0 ] || set -- build
want=""
for group in "$@"; do
  case "$group" in
    build) want="$want $build" ;;
    bench) want="$want $bench" ;;
    bench-server) want="$want $bench_server" ;;
    fuzz) want="$want $fuzz" ;;
    test) want="$want $test" ;;
    *) echo "deps.sh: unknown group '$group' (expected build, bench, bench-server, fuzz or test)" >&2; exit 2 ;;
  esac
done

# npm_ci DIR: npm ci in tests/DIR (the test group only), when its
# node_modules is missing or older than its lock file.
npm_ci() {
  dir=$(cd "$(dirname "$0")/../tests/$1" && pwd)
  [ -d "$dir/node_modules" ] && [ ! "$dir/package-lock.json" -nt "$dir/node_modules" ] && return 0
  echo "deps.sh: npm ci in tests/$1"
  (cd "$dir" && PUPPETEER_SKIP_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error) &&
    touch "$dir/node_modules"
}
npm_all() {
  case " $* " in *" test "*) ;; *) return 0 ;; esac
  npm_ci clients && npm_ci ui
}

missing=""
for pkg in $want; do
  status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null || true)
  case "$status" in
    ii*) ;;
    # A node and npm of another origin (NodeSource's nodejs bundles npm, and
    # conflicts with Debian's npm package) serve as well as Debian's.
    *) case "$pkg" in
         nodejs) command -v node >/dev/null 2>&1 && continue ;;
         npm) command -v npm >/dev/null 2>&1 && continue ;;
       esac
       missing="$missing $pkg" ;;
  esac
done
if [ -z "$missing" ]; then
  npm_all "$@"
  exit 0
fi

echo "deps.sh: installing:$missing"
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO=sudo
  else
    echo "deps.sh: not root; run: sudo apt-get install -y$missing" >&2
    exit 1
  fi
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq || echo "deps.sh: apt-get update failed; trying the cached lists" >&2
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing
npm_all "$@"
