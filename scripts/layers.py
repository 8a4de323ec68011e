#!/usr/bin/env python3
"""layers.py - checks that every #include in src/ points down the layers.

sluice is built in layers, each allowed to use only those below it:

    include/  the public API (sluice.h)            anyone
    base      src/base/    leaf helpers            0
    algo      src/algo/    the pure algorithms     1
    module    src/module/  the Redis module: algo inside Redis   1.5
    store     src/store/   the key table           2
    library   src/*.c      limiters, policies      3
    rules     src/rules/   YAML -> rule set        4
    engine    src/engine/  decisions, backends     5
    fleet     src/fleet/   everything that speaks Redis   6
    sim       src/sim/     the simulator's engine  7
    server    src/server/  the daemon (h2o)        8
    cli       src/cli/     the subcommands         9

A file may include a file of its own layer (its own directory) or of a lower
one; an include that points up, or sideways into another directory of the
same rank, fails the check with the file, the line and the rule it breaks.
No source file includes a .c file. docs/architecture.md is the map.

usage: layers.py [ROOT]   (ROOT: the project's root, default .)
"""
import os
import re
import sys

LAYERS = [("base", "src/base"), ("algo", "src/algo"), ("module", "src/module"),
          ("store", "src/store"),
          ("library", "src"), ("rules", "src/rules"), ("engine", "src/engine"),
          ("fleet", "src/fleet"), ("sim", "src/sim"),
          ("server", "src/server"), ("cli", "src/cli")]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(root, path):
    """The (rank, name) of a file under src/, or None (include/: public)."""
    d = os.path.relpath(os.path.dirname(path), root)
    for rank, (name, folder) in enumerate(LAYERS):
        if d == folder:
            return rank, name
    return None


def resolve(root, src, target):
    """The file an #include "target" in src names (as the compiler finds it:
    beside src first, then -Iinclude), or None when it is neither."""
    for base in (os.path.dirname(src), os.path.join(root, "include")):
        p = os.path.normpath(os.path.join(base, target))
        if os.path.isfile(p):
            return p
    return None


def check(root):
    errors = []
    for dirpath, _, files in os.walk(os.path.join(root, "src")):
        for f in sorted(files):
            if not f.endswith((".c", ".h")):
                continue
            src = os.path.join(dirpath, f)
            here = layer_of(root, src)
            rel = os.path.relpath(src, root)
            if here is None:
                errors.append(f"{rel}: not in any layer (add its folder to "
                              f"scripts/layers.py and docs/architecture.md)")
                continue
            with open(src, encoding="utf-8", errors="replace") as fh:
                for n, line in enumerate(fh, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    target = m.group(1)
                    if target.endswith(".c"):
                        errors.append(f"{rel}:{n}: includes a .c file "
                                      f"({target}): link it instead")
                        continue
                    p = resolve(root, src, target)
                    if p is None:
                        errors.append(f"{rel}:{n}: #include \"{target}\": "
                                      f"no such file beside it or in include/")
                        continue
                    there = layer_of(root, p)
                    if there is None:
                        continue  # include/: the public API, for everyone
                    prel = os.path.relpath(p, root)
                    if there[0] > here[0]:
                        errors.append(
                            f"{rel}:{n}: includes {prel}: {here[1]} may not "
                            f"include {there[1]}, a layer above it "
                            f"(includes point only down: base <- algo <- "
                            f"store <- library <- rules <- engine <- fleet "
                            f"<- server <- cli)")
                    elif there[0] == here[0] and os.path.dirname(p) != \
                            os.path.dirname(os.path.normpath(src)):
                        errors.append(f"{rel}:{n}: includes {prel}: sideways "
                                      f"into another folder of layer "
                                      f"{here[1]}")
    return errors


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    errors = check(root)
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"layers: {len(errors)} include(s) break the layering",
              file=sys.stderr)
        return 1
    print("layers: every include points down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
