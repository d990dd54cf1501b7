#!/usr/bin/env python3
"""Doxygen input filter for the Markdown pages (FILTER_PATTERNS in Doxyfile.in).

The pages link files relative to themselves (`[kernels.cu](kernels.cu)`,
`![plot](../../plots/images/x.png)`) so that they read well on a forge. Doxygen
resolves a link by matching the end of a known file's path, which `../` defeats,
so this rewrites every relative link to a path from the repository root.
It also takes out the comments around the figures `plots/plot.py tables` fills
in (<!-- m ... -->93.8%<!-- /m -->, leaving 93.8%): Doxygen drops the space after
an HTML comment in running text, and a '%' before that space would then escape
the next word. Prints the filtered page to stdout; the file itself is not changed.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    path = os.path.abspath(sys.argv[1])
    here = os.path.dirname(path)
    with open(path, encoding="utf-8") as f:
        text = f.read()

    def fix(m):
        target = m.group(2)
        if re.match(r"[a-z]+://|#|/", target):
            return m.group(0)
        resolved = os.path.relpath(os.path.normpath(os.path.join(here, target)), ROOT)
        if resolved.startswith("plots/images/"):
            resolved = os.path.basename(resolved)  # images are found through IMAGE_PATH
        elif re.search(r"\.(c|h|cu|cuh)$", resolved):
            resolved = "@ref " + resolved  # a source file: its documentation page
        return f"{m.group(1)}({resolved})"

    text = re.sub(r"<!-- m (?:[^-]|-(?!->))*-->(.*?)<!-- /m -->", r"\1", text, flags=re.S)
    sys.stdout.write(re.sub(r"(!?\[[^\]]*\])\(([^)\s]+)\)", fix, text))


if __name__ == "__main__":
    main()
