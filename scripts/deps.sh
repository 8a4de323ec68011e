#!/bin/sh
# deps.sh — installs the Debian packages sluice needs that are missing.
#
#   scripts/deps.sh [GROUP...]     GROUP: build (default), bench, bench-server, fuzz,
#                                  test (the integration tests' peers)
#
# Idempotent: checks each package with dpkg first and installs only what is
# missing, in one apt-get call. Without root it says what to run instead and
# fails, so `make check` never half-works on a machine that lacks a package.
set -eu

build="gcc make binutils libc6-dev libsodium-dev libcmocka-dev libh2o-evloop-dev libssl-dev libyaml-dev libjansson-dev libhiredis-dev libxml2-utils"
bench="golang-go golang-golang-x-time-dev"
bench_server="redis-server redis-tools nginx wrk"
fuzz="clang libclang-rt-dev"
test="python3 curl redis-server redis-tools nginx wrk pkgconf groff-base"

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

missing=""
for pkg in $want; do
  status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null || true)
  case "$status" in
    ii*) ;;
    *) missing="$missing $pkg" ;;
  esac
done
[ -n "$missing" ] || exit 0

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
