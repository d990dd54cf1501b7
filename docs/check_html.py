#!/usr/bin/env python3
"""Check the Doxygen HTML as a reader meets it: the pages render as written.

    check_html.py HTML_DIR

Fails (exit 1, one line per finding) on
* a local link (`<a href>`) or image (`<img src>`) that does not resolve to a file of the output;
* a paragraph that begins with a raw table row (`<p>| …`): a table Doxygen did not parse, usually a `|`
  inside a code span;
* a literal `**` or a stray `*word*` left in the text of a page written in Markdown (outside code);
* emphasis marks around a code span that did not become emphasis (`*<code>x</code>*`);
* a list Doxygen started in the middle of a sentence: a line that begins with a number and a full
  stop ("1024. Predict first") becomes an item of a list the page did not mean (`<ol type="a">`);
* a word of a Markdown page's text linked to a struct's page: Doxygen links a word that names a
  documented struct, as it did with "Welford" on stage 05's page, its title included (write
  `%Welford`); a name in a code span may link to its struct.

Standard library only. The pages written in Markdown are index.html (the README) and md_*.html.
"""
import html.parser
import os
import re
import sys


class Page(html.parser.HTMLParser):
    """The links, images, paragraphs' first text, and text outside code of one HTML file."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.links, self.images, self.paragraph_starts, self.text = [], [], [], []
        self.code_depth = 0     # inside <code>, <pre> or a fragment <div>
        self.div_stack = []     # whether each open <div> is a code fragment
        self.in_paragraph_start = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        if tag == "img" and a.get("src"):
            self.images.append(a["src"])
        if tag in ("code", "pre"):
            self.code_depth += 1
        if tag == "div":
            fragment = "fragment" in (a.get("class") or "").split()
            self.div_stack.append(fragment)
            self.code_depth += fragment
        if tag == "p":
            self.in_paragraph_start = True
            self.paragraph_starts.append("")

    def handle_endtag(self, tag):
        if tag in ("code", "pre"):
            self.code_depth = max(0, self.code_depth - 1)
        if tag == "div" and self.div_stack:
            self.code_depth -= self.div_stack.pop()

    def handle_data(self, data):
        if self.in_paragraph_start and data.strip():
            self.paragraph_starts[-1] = data.strip()
            self.in_paragraph_start = False
        if not self.code_depth:
            self.text.append(data)


def local_target(ref):
    """The file a link or image names, or None for external links and in-page anchors."""
    if re.match(r"[a-z]+:", ref) or ref.startswith("#") or not ref:
        return None
    return ref.split("#")[0].split("?")[0] or None


def check(html_dir):
    problems = []
    names = sorted(n for n in os.listdir(html_dir) if n.endswith(".html"))
    for name in names:
        path = os.path.join(html_dir, name)
        with open(path, encoding="utf-8", errors="replace") as f:
            page = Page()
            page.feed(f.read())
        for kind, refs in (("link", page.links), ("image", page.images)):
            for ref in refs:
                target = local_target(ref)
                if target and not os.path.exists(os.path.join(html_dir, target)):
                    problems.append(f"{name}: {kind} to '{ref}' does not resolve")
        markdown_page = name == "index.html" or name.startswith("md_")
        if not markdown_page:
            continue
        for start in page.paragraph_starts:
            if start.startswith("|"):
                problems.append(f"{name}: a paragraph begins with a raw table row: '{start[:70]}'")
        text = " ".join(page.text)
        for m in re.finditer(r"\*\*[^*\n]{1,60}", text):
            problems.append(f"{name}: a literal '**' in the text: '{m.group(0)[:60]}'")
        for m in re.finditer(r"(?<![\w*])\*[A-Za-z][\w-]{1,30}\*(?![\w*])", text):
            problems.append(f"{name}: a literal '*…*' in the text: '{m.group(0)}'")
        with open(path, encoding="utf-8", errors="replace") as f:
            raw = f.read()
        for m in re.finditer(r"\*<code>[^<]{0,40}</code>|<code>[^<]{0,40}</code>\*", raw):
            problems.append(f"{name}: emphasis marks around code left as text: '{m.group(0)}'")
        for m in re.finditer(r'<ol type="[aiAI]">', raw):
            problems.append(f"{name}: a list started mid-sentence ({m.group(0)}): a line begins with 'N.'")
        # a struct's name in a code span may link to its page; a word of the text must not
        for m in re.finditer(r'(<code>[^<]*)?<a class="el" href="((?:struct|class|union)[^"]*)"[^>]*>([^<]*)</a>', raw):
            if not m.group(1):
                problems.append(f"{name}: the word '{m.group(3)}' links to {m.group(2)} (Doxygen's autolink; "
                                f"write %{m.group(3)})")
    return problems, len(names)


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.exit("usage: check_html.py HTML_DIR")
    problems, n = check(sys.argv[1])
    for p in problems:
        print(p)
    if problems:
        sys.exit(f"check_html: {len(problems)} problem(s) in {n} pages")
    print(f"check_html: {n} pages, every local link and image resolves, no raw table rows, no literal markup")


if __name__ == "__main__":
    main()
