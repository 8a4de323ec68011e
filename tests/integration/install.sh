#!/bin/sh
# install.sh — `make install` into a staging tree, then what a user of the
# installed library does (POSIX sh).
#
#   SLUICE=build/sluice sh tests/integration/install.sh     (make integration)
#
# Run from the repository root, after the build: it installs the build that
# $SLUICE belongs to (BUILD=$(dirname $SLUICE), and for build/san-* the same
# SANITIZE, so nothing is rebuilt with other flags), with DESTDIR=$tmp and
# PREFIX=/usr, and checks that
#   - every file is there, the soname links too (and in the build directory);
#   - pkg-config finds sluice.pc in the tree (PKG_CONFIG_LIBDIR and
#     PKG_CONFIG_SYSROOT_DIR point into it) and gives the right flags;
#   - examples/quickstart.c, built with `pkg-config --cflags --libs sluice`,
#     links against libsluice.so and runs (LD_LIBRARY_PATH to the tree's
#     lib); built with `cc -static ... --static`, as the README shows, it
#     links libsluice.a and runs without;
#   - both installed libraries export exactly the functions of the installed
#     sluice.h, nothing else, and a program with its own store_lock
#     and log_msg links beside libsluice.a;
#   - the man page renders without a warning, carries the version, and names
#     every long option that `sluice CMD --help` prints;
#   - a default install goes under /usr/local, and make uninstall removes
#     every file it installed.
# In a sanitized build the programs are compiled with the same -fsanitize,
# since its libraries need the sanitizer's runtime, and as a sanitizer
# cannot link a fully static program, the static one names libsluice.a
# exactly (-l:libsluice.a) instead of -static; it says so.

. "$(dirname "$0")/check_lib.sh"
lib_tools="make pkg-config nm readelf groff"
lib_init install

CC=${CC:-cc}
build=$(dirname "$SLUICE")
case $(basename "$build") in
  san-*) san=$(basename "$build" | sed 's/^san-//; s/-/,/g') ;;
  *) san="" ;;
esac
sanflags=""
[ -z "$san" ] || sanflags="-fsanitize=$san -fno-omit-frame-pointer"
if [ ! -f Makefile ] || [ ! -f include/sluice.h ]; then
  echo "install.sh: run from the repository root (as make check does)" >&2
  exit 1
fi
version=$("$SLUICE" version | sed 's/^sluice //')

# mk ARGS... — the project's make for this build, alone (not as part of the
# make that runs the tests: its flags and job server are not passed on);
# output in $tmp/make.out, status in $rc.
mk() {
  env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL \
    make -s BUILD="$build" SANITIZE="$san" "$@" >"$tmp/make.out" 2>&1
  rc=$?
}

# ok NAME COMMAND... — passes when COMMAND succeeds.
ok() {
  _name=$1
  shift
  if "$@" >"$tmp/ok.out" 2>&1; then pass; else
    fail "$_name: '$*' failed: $(head -n 3 "$tmp/ok.out" | cut -c1-200)"
  fi
}

# link_is NAME LINK TARGET — LINK is a symbolic link to TARGET.
link_is() {
  if [ -L "$2" ] && [ "$(readlink "$2")" = "$3" ]; then pass; else
    fail "$1: $2 is not a link to $3"
  fi
}

# --------------------------------------------------------------------------
# The staging install.
root=$tmp/root
mk install DESTDIR="$root" PREFIX=/usr
if [ "$rc" -ne 0 ]; then
  fail "make install: exit status $rc: $(head -n 5 "$tmp/make.out")"
  lib_finish
fi
pass
lib=$root/usr/lib
for f in bin/sluice include/sluice.h lib/libsluice.a lib/libsluice.so.$version \
    lib/pkgconfig/sluice.pc share/man/man1/sluice.1; do
  ok "installed $f" test -f "$root/usr/$f"
done
ok "bin/sluice is executable" test -x "$root/usr/bin/sluice"
major=${version%%.*}
link_is "soname link" "$lib/libsluice.so.$major" "libsluice.so.$version"
link_is "development link" "$lib/libsluice.so" "libsluice.so.$major"
link_is "build's soname link" "$build/libsluice.so.$major" "libsluice.so.$version"
link_is "build's development link" "$build/libsluice.so" "libsluice.so.$major"
soname=$(readelf -d "$lib/libsluice.so.$version" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
if [ "$soname" = "libsluice.so.$major" ]; then pass; else
  fail "soname: '$soname', want libsluice.so.$major"
fi

# --------------------------------------------------------------------------
# pkg-config from the tree.
PKG_CONFIG_LIBDIR=$lib/pkgconfig
PKG_CONFIG_SYSROOT_DIR=$root
export PKG_CONFIG_LIBDIR PKG_CONFIG_SYSROOT_DIR
got=$(pkg-config --modversion sluice 2>&1)
if [ "$got" = "$version" ]; then pass; else
  fail "pkg-config --modversion sluice: '$got', want $version"
fi
got=$(pkg-config --libs sluice 2>&1)
if [ "$(echo $got)" = "-L$lib -lsluice" ]; then pass; else
  fail "pkg-config --libs sluice: '$got', want '-L$lib -lsluice'"
fi
got=$(pkg-config --cflags sluice 2>&1)
if [ "$(echo $got)" = "-I$root/usr/include" ]; then pass; else
  fail "pkg-config --cflags sluice: '$got', want '-I$root/usr/include'"
fi
got=$(pkg-config --static --libs sluice 2>&1)
case " $got " in
  *" -lsluice "*"-lsodium "*) pass ;;
  *) fail "pkg-config --static --libs sluice: '$got' lacks -lsluice ... -lsodium" ;;
esac

# --------------------------------------------------------------------------
# The README's example against the installed libraries, as the README
# builds it: shared, and static (-static: both libraries sit in one
# directory, and without it -lsluice would take the shared one).
if [ -z "$san" ]; then
  static_link="-static $(pkg-config --static --libs sluice)"
else
  echo "install.sh: $san build: the static links use -l:libsluice.a, not -static"
  static_link=$(pkg-config --static --libs sluice | sed 's/-lsluice/-l:libsluice.a/')
fi
# shellcheck disable=SC2046
if $CC $sanflags -o "$tmp/qs-shared" examples/quickstart.c \
    $(pkg-config --cflags --libs sluice) >"$tmp/cc.out" 2>&1; then
  pass
  if LD_LIBRARY_PATH=$lib "$tmp/qs-shared" >"$tmp/qs.out" 2>&1 &&
     grep -q '^request 10: allow' "$tmp/qs.out" &&
     grep -q '^request 11: deny' "$tmp/qs.out"; then pass; else
    fail "quickstart (shared) did not run: $(head -n 3 "$tmp/qs.out")"
  fi
  if readelf -d "$tmp/qs-shared" | grep -q "NEEDED.*\[libsluice.so.$major\]"; then
    pass
  else
    fail "quickstart (shared) does not need libsluice.so.$major"
  fi
else
  fail "quickstart (shared) does not build: $(head -n 5 "$tmp/cc.out")"
fi
# shellcheck disable=SC2046,SC2086
if $CC $sanflags -o "$tmp/qs-static" examples/quickstart.c \
    $(pkg-config --cflags sluice) $static_link >"$tmp/cc.out" 2>&1; then
  pass
  if "$tmp/qs-static" >"$tmp/qs.out" 2>&1 &&
     grep -q '^request 11: deny' "$tmp/qs.out"; then pass; else
    fail "quickstart (static) did not run: $(head -n 3 "$tmp/qs.out")"
  fi
  if readelf -d "$tmp/qs-static" | grep -q 'NEEDED.*libsluice'; then
    fail "quickstart (static) needs libsluice.so"
  else
    pass
  fi
else
  fail "quickstart (static) does not build: $(head -n 5 "$tmp/cc.out")"
fi

# --------------------------------------------------------------------------
# Exports: exactly the functions sluice.h declares (a declaration without
# SL_API is one the libraries lack), in both libraries.
sed -n 's/^\(SL_API \)\{0,1\}[a-z][a-z0-9_ ]*[ *]\(sl_[a-z0-9_]*\)(.*/\2/p' \
  "$root/usr/include/sluice.h" | sort >"$tmp/api"
if [ "$(wc -l <"$tmp/api")" -ge 20 ]; then pass; else
  fail "sluice.h: only $(wc -l <"$tmp/api") functions found"
fi
# exports NAME NM-ARGS... — the defined global symbols nm lists must be the API.
exports() {
  _name=$1
  shift
  nm "$@" | awk 'NF == 3 { print $3 }' | sort -u >"$tmp/exports"
  if cmp -s "$tmp/api" "$tmp/exports"; then pass; else
    fail "$_name: exports differ from sluice.h (< header, > nm): $(diff "$tmp/api" "$tmp/exports" | grep '^[<>]' | head -n 8 | tr '\n' ' ')"
  fi
}
exports "nm -g libsluice.a" -g --defined-only "$lib/libsluice.a"
exports "nm -D libsluice.so" -D --defined-only "$lib/libsluice.so"
exports "nm -g libsluice.so" -g --defined-only "$lib/libsluice.so"
cat >"$tmp/clash.c" <<'EOF'
/* An application whose own names are the library's internal ones (the
   store's, which sl_store_new needs, and a base/ helper's). */
#include <stddef.h>
#include "sluice.h"
int store_lock(void);
int log_msg(void);
int store_lock(void) { return 1; }
int log_msg(void) { return 2; }
int main(void) {
  sl_store *store;
  if (sl_store_new(NULL, &store)) return 1;
  sl_store_free(store);
  return store_lock() + log_msg() != 3;
}
EOF
# shellcheck disable=SC2046,SC2086
if $CC $sanflags -o "$tmp/clash" "$tmp/clash.c" $(pkg-config --cflags sluice) \
    $static_link >"$tmp/cc.out" 2>&1 && "$tmp/clash" >/dev/null 2>&1; then
  pass
else
  fail "a program with its own store_lock and log_msg: $(head -n 3 "$tmp/cc.out")"
fi

# --------------------------------------------------------------------------
# The man page: no warnings, the version, every option --help prints.
man=$root/usr/share/man/man1/sluice.1
if groff -man -ww -z "$man" >"$tmp/groff.out" 2>&1 && [ ! -s "$tmp/groff.out" ]; then
  pass
else
  fail "groff -man -ww: $(head -n 3 "$tmp/groff.out")"
fi
if grep -q "^\.TH SLUICE 1 .*\"sluice $version\"" "$man"; then pass; else
  fail "sluice.1: .TH does not say sluice $version"
fi
for cmd in serve check-config replay sim accuracy bench version; do
  if ! grep -qF ".SS \"sluice $(echo "$cmd" | sed 's/-/\\-/g')" "$man"; then
    fail "sluice.1: no section for sluice $cmd"
    continue
  fi
  missing=""
  for opt in $("$SLUICE" "$cmd" --help 2>/dev/null | grep -o -- '--[a-z][a-z-]*' | sort -u); do
    grep -qF -- "$(echo "$opt" | sed 's/-/\\-/g')" "$man" || missing="$missing $opt"
  done
  if [ -z "$missing" ]; then pass; else
    fail "sluice.1: sluice $cmd --help has options the page lacks:$missing"
  fi
done

# --------------------------------------------------------------------------
# The default PREFIX, and make uninstall.
mk install DESTDIR="$tmp/default"
if [ "$rc" -eq 0 ] && [ -x "$tmp/default/usr/local/bin/sluice" ] &&
   [ -f "$tmp/default/usr/local/lib/pkgconfig/sluice.pc" ]; then pass; else
  fail "make install without PREFIX: not under /usr/local: $(head -n 3 "$tmp/make.out")"
fi
mk uninstall DESTDIR="$root" PREFIX=/usr
left=$(find "$root" ! -type d | head -n 5)
if [ "$rc" -eq 0 ] && [ -z "$left" ]; then pass; else
  fail "make uninstall left: $left $(head -n 3 "$tmp/make.out")"
fi

lib_finish
