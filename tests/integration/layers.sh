#!/bin/sh
# layers.sh — the layering checks that `make check` runs (POSIX sh):
# scripts/layers.py (make layers: every #include in src/ points down the
# layers) passes on the tree, and fails — naming the file, the line and the
# rule — on a copy of the tree with an upward, a sideways or a .c include
# planted in it; scripts/sizes.py (no file over 1,000 lines, no function
# over 150) likewise, on a planted long function.
#
#   SLUICE=build/sluice sh tests/integration/layers.sh   (make integration)

. "$(dirname "$0")/check_lib.sh"
lib_init layers
root=$(cd "$(dirname "$0")/../.." && pwd)

# plant NAME — a fresh copy of the tree's sources in $tmp/NAME.
plant() {
  rm -rf "$tmp/$1"
  mkdir -p "$tmp/$1"
  cp -R "$root/src" "$root/include" "$tmp/$1/"
}

expect_cmd "the tree: every include points down" 0 "every include points down" \
  python3 "$root/scripts/layers.py" "$root"

plant up
printf '#include "../engine/engine.h"\n' >>"$tmp/up/src/base/clock.c"
expect_cmd "an upward include (base -> engine) fails" 1 \
  "src/base/clock.c:[0-9]*: includes src/engine/engine.h: base may not include engine" \
  python3 "$root/scripts/layers.py" "$tmp/up"

plant fleet
printf '#include "../server/server.h"\n' >>"$tmp/fleet/src/fleet/slot.h"
expect_cmd "fleet including the server fails" 1 \
  "src/fleet/slot.h:[0-9]*: includes src/server/server.h: fleet may not include server" \
  python3 "$root/scripts/layers.py" "$tmp/fleet"

plant side
mkdir -p "$tmp/side/src/engine2"
expect_cmd "a folder that is no layer fails" 1 "not in any layer" \
  sh -c "printf '/* x */\n' >'$tmp/side/src/engine2/x.c' &&
         python3 '$root/scripts/layers.py' '$tmp/side'"

plant dotc
printf '#include "limiter.c"\n' >>"$tmp/dotc/src/policy.c"
expect_cmd "including a .c file fails" 1 "src/policy.c:[0-9]*: includes a .c file" \
  python3 "$root/scripts/layers.py" "$tmp/dotc"

expect_cmd "the tree: no file or function too long" 0 "within bounds" \
  python3 "$root/scripts/sizes.py" "$root"

plant long
{
  printf 'int too_long(void);\nint too_long(void) {\n  int x = 0;\n'
  i=0
  while [ $i -lt 160 ]; do echo "  x++;"; i=$((i + 1)); done
  printf '  return x;\n}\n'
} >>"$tmp/long/src/base/fmt.c"
expect_cmd "a function over 150 lines fails" 1 \
  "src/base/fmt.c:[0-9]*: function too_long is [0-9]* lines" \
  python3 "$root/scripts/sizes.py" "$tmp/long"

lib_finish
