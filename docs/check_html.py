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
  `%Welford`); a name in a code span may link to its struct;
* Doxygen's commands or HTML tags shown as text (`@code`, `@section`, `@ref`, `<tt>`, `<table`), as a
  Markdown link broken across two lines makes Doxygen print them, and a stray backtick in the text;
* a `%`-word of the page's source code that the HTML does not show as meant: in a code span Doxygen
  shows `%%x` as `%x` and eats the `%` of `%x` (meant for `%Name`, the escape of a documented struct's
  name), so `%globaltimer` must be written `%%globaltimer` there; a fenced block shows its text as written;
* a figure glued to the next word ("1.41×v1's"): Doxygen drops the space after an HTML comment;
* an ordered list whose numbering in the HTML is not the source's (a code block or paragraph between
  items 3 and 4 that is not indented makes Doxygen start again at 1);
* a link to an anchor its page does not have, and a `file:` link (Doxygen makes one of "file:line").

Standard library only. The pages written in Markdown are index.html (the README) and md_*.html; their
sources are found in the repository above this file's folder.
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


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FENCE = re.compile(r"^\s*(```|~~~)")


def markdown_sources():
    """HTML page name -> its Markdown source in the repository (Doxygen names md_<path with _>.html)."""
    out = {"index.html": os.path.join(ROOT, "README.md")}
    for d, dirs, files in os.walk(ROOT):
        dirs[:] = [x for x in dirs if not x.startswith((".", "build"))]
        for f in files:
            if f.endswith(".md"):
                rel = os.path.relpath(os.path.join(d, f), ROOT)
                out["md_" + re.sub(r"[/.]", "_", rel[:-3]) + ".html"] = os.path.join(ROOT, rel)
    return out


def source_code_and_items(path):
    """The `%`-words inside a Markdown source's code (spans and fenced blocks), and the numbers of its ordered
    list items in order (outside fenced blocks)."""
    words, items, in_fence = [], [], False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if FENCE.match(line):
                in_fence = not in_fence
                continue
            if in_fence:  # a fenced block shows its text as written
                words += [(w, w) for w in re.findall(r"%+[A-Za-z_]\w*", line)]
                continue
            for span in re.findall(r"`([^`]+)`", line):  # a code span: Doxygen shows %%x as %x
                asm = re.search(r"%\d", span)  # inline asm (operands %0, %1): its %%x is meant as written
                words += [(w, w[1:] if w.startswith("%%") and not asm else w)
                          for w in re.findall(r"%+[A-Za-z_]\w*", span)]
            m = re.match(r"\s{0,8}(\d+)\. ", line)
            if m:
                items.append(int(m.group(1)))
    return words, items


class Lists(html.parser.HTMLParser):
    """The number each ordered list item of a page shows, in document order, and the ids it defines."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.numbers, self.ids = [], [], set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("id", "name"):
            if a.get(key):
                self.ids.add(a[key])
        if tag in ("ol", "ul"):
            self.stack.append([tag, int(a.get("start") or 1)])
        elif tag == "li" and self.stack and self.stack[-1][0] == "ol":
            self.numbers.append(self.stack[-1][1])
            self.stack[-1][1] += 1

    def handle_endtag(self, tag):
        if tag in ("ol", "ul") and self.stack:
            self.stack.pop()


def page_ids(html_dir, name, cache={}):
    if name not in cache:
        path = os.path.join(html_dir, name)
        lists = Lists()
        if os.path.exists(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                lists.feed(f.read())
        cache[name] = lists.ids
    return cache[name]


def local_target(ref):
    """The file a link or image names, or None for external links and in-page anchors."""
    if re.match(r"[a-z]+:", ref) or ref.startswith("#") or not ref:
        return None
    return ref.split("#")[0].split("?")[0] or None


def check(html_dir):
    problems = []
    names = sorted(n for n in os.listdir(html_dir) if n.endswith(".html"))
    sources = markdown_sources()
    # the structs and classes Doxygen documents: a word of a page that names one becomes a link to it
    documented = {html.unescape(m.group(1)) for n in names
                  for m in [re.match(r"(?:struct|class|union)(\w+)\.html$", n)] if m and "_" not in m.group(1)}
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
        for ref in page.links:
            if ref.startswith("file:"):
                problems.append(f"{name}: a 'file:' link ('{ref}'): Doxygen made a link of the text (write %file)")
            elif "#" in ref and not re.match(r"[a-z]+://", ref):
                target, anchor = ref.split("#", 1)
                target = target or name
                if anchor and os.path.exists(os.path.join(html_dir, target)) and anchor not in page_ids(html_dir, target):
                    problems.append(f"{name}: link to '{ref}': {target} has no anchor '{anchor}'")
        markdown_page = name == "index.html" or name.startswith("md_")
        if not markdown_page:
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            raw = f.read()
        text = " ".join(page.text)
        for m in re.finditer(r"(?<![\w@])[@\\](code|endcode|section|subsection|ref|anchor|page|brief|image)\b[^\n]{0,30}"
                             r"|<\s*/?\s*(tt|table|tr|td|th|code|pre|div|span|em|strong|br|img)\b[^\n]{0,30}"
                             r"|autotoc_md\d+", text):
            problems.append(f"{name}: Doxygen markup shown as text: '{m.group(0)[:50]}'")
        for m in re.finditer(r"\d(?:%|×| µs| ms)[A-Za-z(]", text):
            problems.append(f"{name}: a figure glued to the next word: '{text[max(0, m.start() - 20):m.end() + 15]}' "
                            "(a comment before the space? docs/md_filter.py takes out the figures' markers)")
        for m in re.finditer(r"[^\s`]{0,20}`[^\n]{0,20}", text):
            problems.append(f"{name}: a stray backtick in the text: '{m.group(0)}'")
        source = sources.get(name)
        if source:
            words, items = source_code_and_items(source)
            code_text = html.unescape(re.sub(r"<[^>]+>", "", raw))
            for word, shown in sorted(set(words)):
                if word[1] != "%" and word[1:] in documented:
                    continue  # %Name before a documented struct's name: the escape that keeps Doxygen from linking it
                if not re.search(rf"(?<!%){re.escape(shown)}(?!\w)", code_text):
                    problems.append(f"{name}: '{word}' of the source's code is not shown as '{shown}' (Doxygen eats a "
                                    "'%' before a word in a code span: write %%word there, or use a fenced block)")
            lists = Lists()
            lists.feed(raw)
            if items and lists.numbers != items:
                first = next((i for i, (a, b) in enumerate(zip(lists.numbers, items)) if a != b),
                             min(len(items), len(lists.numbers)))
                shown = lists.numbers[first] if first < len(lists.numbers) else "nothing"
                want = items[first] if first < len(items) else "nothing"
                problems.append(f"{name}: ordered list item {first + 1} of the page shows {shown} where the source "
                                f"numbers it {want} (a list that starts again: indent what stands between its items)")
        for start in page.paragraph_starts:
            if start.startswith("|"):
                problems.append(f"{name}: a paragraph begins with a raw table row: '{start[:70]}'")
        for m in re.finditer(r"\*\*[^*\n]{1,60}", text):
            problems.append(f"{name}: a literal '**' in the text: '{m.group(0)[:60]}'")
        for m in re.finditer(r"(?<![\w*])\*[A-Za-z][\w-]{1,30}\*(?![\w*])", text):
            problems.append(f"{name}: a literal '*…*' in the text: '{m.group(0)}'")
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
    print(f"check_html: {n} pages, every local link, anchor and image resolves, no raw table rows, no literal "
          "markup, code shown as written, lists numbered as written")


if __name__ == "__main__":
    main()
