"""WikiExtractor files -> one sentence per line: the corpus of the bert-mini stand-in, for
`baselines/mlm.py --random-init` (docs/standin.md).

    python examples/wiki_sentences.py WIKITASKS/text/AA --out runs/wiki_sentences.txt

WIKITASKS is a checkout of github.com/Vibhas-hs-edu/WikiTasks at commit 52b1f163137bc40b0f67cbf129d5dab4f6fd5901;
text/AA holds wiki_00 ... wiki_63, each a run of `<doc id=.. url=.. title=..>` ... `</doc>` articles. The stand-in's
README gives its cleaning rules, applied here in this order:
  - an article's first line (its title) is dropped, and an article with no text after it (a stub) gives nothing;
  - HTML entities are unescaped (&amp; -> &) and leftover tags (<br>, <ref ...>) removed;
  - the text is split into sentences after . ! or ? followed by a space and a capital letter or digit, except
    after a common abbreviation (ABBREVIATIONS) or a single capital (initials: "J. R. R. Tolkien");
  - a sentence is kept when it has 6 to 150 words, at least 30 characters, and letters make at least 60% of its
    characters other than spaces; a sentence seen before (ignoring case) is dropped.
The README's own script (tools/pretrain_mlm.py, not distributed) is not this one: its splitter's abbreviation list
is not published, so the count here need not be its 421,166 sentences. Nor does this pack a document's sentences
into sequences of up to 126 tokens as the stand-in's training did: baselines/mlm.py trains on one line at a time.
"""
from __future__ import annotations

import argparse
import html
import re
import sys
from pathlib import Path
from typing import Iterable, Iterator

ABBREVIATIONS = {"mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "etc", "no", "co", "inc", "ltd", "gen",
                 "col", "lt", "sgt", "capt", "rev", "mt", "ft", "jan", "feb", "mar", "apr", "aug", "sep", "sept",
                 "oct", "nov", "dec", "e.g", "i.e", "u.s", "approx", "est", "fig", "vol"}
# a candidate sentence end: . ! or ? (and closing quotes or brackets), a space, then a capital or a digit
END = re.compile(r"""[.!?]["')\]]*(\s+)(?=["'(\[]?[A-Z0-9])""")
TAG = re.compile(r"<[^>]+>")


def articles(lines: Iterable[str]) -> Iterator[list[str]]:
    """Each <doc> ... </doc> article's lines, its title (the first line) dropped, blank lines dropped."""
    body = None
    for line in lines:
        if line.startswith("<doc "):
            body = []
        elif line.startswith("</doc>") and body is not None:
            yield [text for text in body[1:] if text.strip()]
            body = None
        elif body is not None:
            body.append(line.strip())


def split_sentences(text: str) -> list[str]:
    """The text cut at every END that does not follow an abbreviation or a single capital (an initial)."""
    sentences, start = [], 0
    for match in END.finditer(text):
        words = text[start : match.start(1)].split()
        last_word = words[-1].rstrip(".!?\"')]").lower() if words else ""
        if last_word in ABBREVIATIONS or (len(last_word) == 1 and last_word.isalpha()):
            continue
        sentences.append(text[start : match.start(1)].strip())
        start = match.end()
    sentences.append(text[start:].strip())
    return [s for s in sentences if s]


def keep(sentence: str) -> bool:
    """6 to 150 words, at least 30 characters, letters at least 60% of the characters other than spaces."""
    words, chars = sentence.split(), sentence.replace(" ", "")
    return 6 <= len(words) <= 150 and len(sentence) >= 30 and sum(c.isalpha() for c in chars) >= 0.6 * len(chars)


def sentences(files: Iterable[Path]) -> Iterator[str]:
    """The kept sentences of the files' articles, in order, each once (ignoring case)."""
    seen = set()
    for path in files:
        with open(path, encoding="utf-8") as f:
            for paragraphs in articles(f):
                for paragraph in paragraphs:
                    for sentence in split_sentences(TAG.sub("", html.unescape(paragraph))):
                        if keep(sentence) and sentence.lower() not in seen:
                            seen.add(sentence.lower())
                            yield sentence


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="WikiExtractor files (the stand-in's corpus) -> one cleaned sentence "
                                            "per line, for baselines/mlm.py --random-init.")
    p.add_argument("src", help="folder of WikiExtractor files (WikiTasks' text/AA: wiki_00 ... wiki_63)")
    p.add_argument("--out", required=True, help="the text file to write, one sentence per line")
    return p


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    files = sorted(Path(args.src).glob("wiki_*")) if Path(args.src).is_dir() else []
    if not files:
        raise SystemExit(f"error: no wiki_* files in {args.src}: give WikiTasks' text/AA folder")
    count = 0
    with open(args.out, "w", encoding="utf-8") as out:
        for sentence in sentences(files):
            out.write(sentence + "\n")
            count += 1
    print(f"{count} sentences from {len(files)} files -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
