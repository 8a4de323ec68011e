#!/usr/bin/env python3
"""sizes.py - no file under src/ over 1,000 lines, no function over 150.

A file or a function past those sizes is asking to be cut (the project's
quality bar): this names each one, with its length, and fails.

usage: sizes.py [ROOT]   (ROOT: the project's root, default .)
"""
import os
import re
import sys

MAX_FILE, MAX_FUNCTION = 1000, 150


def code_only(text):
    """text with comments, strings and character literals blanked (newlines
    kept, so that line numbers stay), for counting braces."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", text[i:j + 1]))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(text):
    """(name, first line, last line) of each function defined in text."""
    code = code_only(text)
    # Preprocessor lines (and their continuations) are not C to count.
    code = re.sub(r"(?m)^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", lambda m:
                  re.sub(r"[^\n]", " ", m.group(0)), code)
    found, depth, header, header_line, line, start = [], 0, "", None, 1, None
    for c in code:
        if c == "\n":
            line += 1
        if depth == 0:
            if c == "{":
                head = header.strip()
                m = re.search(r"([A-Za-z_]\w*)\s*\(", head)
                if (m and "=" not in head.split("(")[0] and
                        not re.match(r"(struct|union|enum|typedef)\b", head)):
                    start = (m.group(1), header_line)
                depth = 1
                header, header_line = "", None
            elif c in ";}":
                header, header_line = "", None
            else:
                if header_line is None and not c.isspace():
                    header_line = line
                header += c
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0 and start:
                found.append((start[0], start[1], line))
                start = None
    return found


def check(root):
    errors = []
    for dirpath, _, files in os.walk(os.path.join(root, "src")):
        for f in sorted(files):
            if not f.endswith((".c", ".h")):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, root)
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            lines = text.count("\n")
            if lines > MAX_FILE:
                errors.append(f"{rel}: {lines} lines (at most {MAX_FILE}): "
                              f"cut it along its concerns")
            for name, first, last in functions(text):
                n = last - first + 1
                if n > MAX_FUNCTION:
                    errors.append(f"{rel}:{first}: function {name} is {n} "
                                  f"lines (at most {MAX_FUNCTION})")
    return errors


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    errors = check(root)
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"sizes: {len(errors)} file(s) or function(s) too long",
              file=sys.stderr)
        return 1
    print("sizes: every file and function within bounds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
