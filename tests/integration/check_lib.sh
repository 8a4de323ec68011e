# check_lib.sh — what every integration script shares (POSIX sh; sourced,
# not run: a script starts with
#   . "$(dirname "$0")/check_lib.sh"; lib_init NAME ).
#
#   - lib_init NAME: checks that $SLUICE (default build/sluice) and every
#     tool named in $lib_tools are there, makes the temporary directory
#     $tmp, and installs the traps: lib_cleanup runs on exit (it removes
#     $tmp; serve_lib.sh redefines it to stop its processes first);
#   - a check counter: pass, fail "name: why", lib_finish (prints the
#     totals, exits 1 if any check failed). While $defer is set, outcomes
#     are held back in $tmp/deferred (serve_lib.sh's in_window judges them).

SLUICE=${SLUICE:-build/sluice}
checks=0
fails=0
defer=""
lib_tools=""

pass() {
  if [ -n "$defer" ]; then echo "PASS" >>"$tmp/deferred"; else
    checks=$((checks + 1))
  fi
}
fail() {
  if [ -n "$defer" ]; then echo "FAIL: $*" >>"$tmp/deferred"; else
    checks=$((checks + 1))
    fails=$((fails + 1))
    echo "FAIL: $*" >&2
  fi
}

lib_cleanup() { rm -rf "$tmp"; }

# expect_cmd NAME WANT_STATUS PATTERN CMD... — runs CMD; its exit status
# must be WANT_STATUS and its output (stdout and stderr) match PATTERN.
expect_cmd() {
  _name=$1 _want=$2 _pat=$3
  shift 3
  "$@" >"$tmp/out" 2>&1
  _got=$?
  if [ "$_got" -ne "$_want" ]; then
    fail "$_name: exit status $_got, want $_want: $(head -c 400 "$tmp/out")"
  elif ! grep -q -- "$_pat" "$tmp/out"; then
    fail "$_name: no '$_pat' in: $(head -c 400 "$tmp/out")"
  else
    pass
  fi
}

# lib_init NAME — checks $SLUICE and $lib_tools, makes $tmp, installs traps.
lib_init() {
  lib_name=$1
  if [ ! -x "$SLUICE" ]; then
    echo "$lib_name.sh: '$SLUICE' is not an executable (run make first)" >&2
    exit 1
  fi
  for _t in $lib_tools; do
    if ! command -v "$_t" >/dev/null 2>&1; then
      echo "$lib_name.sh: '$_t' is missing (scripts/deps.sh test installs it)" >&2
      exit 1
    fi
  done
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-$lib_name.XXXXXX") || exit 1
  trap 'lib_cleanup' EXIT
  trap 'exit 129' HUP
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

# lib_finish — the totals; exits 1 when a check failed.
lib_finish() {
  if [ "$fails" -ne 0 ]; then
    echo "$lib_name.sh: $fails of $checks checks FAILED" >&2
    exit 1
  fi
  echo "$lib_name.sh: all $checks checks passed"
  exit 0
}
