#!/usr/bin/python3
"""The documentation's links (issue 38, B9): every relative link of README.md, docs/*.md and
trainer/README.md names a file that exists and, into a Markdown file, a heading it has (GitHub's
anchor of it); every page of docs/ is reachable from README.md (directly or through
docs/USAGE.md); and docs/USAGE.md, the index of the reference, links every section (## and ###
heading) of every reference page. Reads files only; DSCACHE is only the runner's preflight.
"""

import os
import re
import sys
from pathlib import Path

from cli_helpers import check, main

SOURCE_ROOT = Path(os.environ.get("DSCACHE_SOURCE_ROOT", Path(__file__).resolve().parents[2]))
DOCS = SOURCE_ROOT / "docs"
REFERENCE = ["BUILD.md", "FIELDS.md", "SERVING.md", "PYTHON.md", "TRAINER.md", "OPERATIONS.md"]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchor(heading):
    """GitHub's anchor of a heading: lower case, punctuation but - and _ dropped, spaces to -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def headings(path, levels=6):
    """[(level, text)] of the Markdown headings of `path` outside fenced blocks."""
    found, fence = [], False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        m = re.match(r"^(#{1,%d})\s+(.*)" % levels, line)
        if m and not fence:
            found.append((len(m.group(1)), m.group(2)))
    return found


def relative_links(path):
    """[(link, target Path, fragment)] of the relative links of `path` (no http(s), no mailto)."""
    out = []
    for m in LINK.finditer(path.read_text()):
        link = m.group(1)
        if re.match(r"^[a-z]+:", link):
            continue
        file, _, frag = link.partition("#")
        out.append((link, (path.parent / file).resolve() if file else path.resolve(), frag))
    return out


def case_docs_links(tmp):
    pages = [SOURCE_ROOT / "README.md", SOURCE_ROOT / "trainer" / "README.md"]
    pages += sorted(DOCS.glob("*.md"))
    bad, n = [], 0
    for page in pages:
        for link, target, frag in relative_links(page):
            n += 1
            if not target.exists():
                bad.append(f"{page.relative_to(SOURCE_ROOT)}: {link}: no such file")
            elif frag and target.suffix == ".md" and frag not in {anchor(h) for _, h in
                                                                  headings(target)}:
                bad.append(f"{page.relative_to(SOURCE_ROOT)}: {link}: no heading with that anchor")
    check(n > 100, f"only {n} relative links found: the link pattern no longer matches")
    check(not bad, "broken links:\n" + "\n".join(bad))


def case_usage_index(tmp):
    usage = DOCS / "USAGE.md"
    linked = {(t.name, frag) for _, t, frag in relative_links(usage)}
    missing = [f"{page}#{anchor(h)} ({h})" for page in REFERENCE
               for level, h in headings(DOCS / page, 3)
               if level >= 2 and (page, anchor(h)) not in linked]
    check(not missing, "docs/USAGE.md does not link these sections:\n" + "\n".join(missing))
    reachable = {t.name for _, t, _ in relative_links(SOURCE_ROOT / "README.md")
                 if t.parent == DOCS}
    reachable |= {t.name for _, t, _ in relative_links(usage) if t.parent == DOCS}
    check("USAGE.md" in reachable, "README.md does not link docs/USAGE.md")
    unreachable = sorted(p.name for p in DOCS.glob("*.md")
                         if p.name not in reachable and not p.name.startswith("pending-"))
    check(not unreachable, f"docs pages README.md does not reach (directly or via USAGE.md): "
                           f"{unreachable}")


CASES = {"docs_links": case_docs_links, "usage_index": case_usage_index}

if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
