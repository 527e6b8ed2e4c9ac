"""Multi-News' text conventions: a source line holds the articles separated by ``|||||`` with newlines written as
``NEWLINE_CHAR``; a summary starts with "– ". The summarization recipe reads and writes them, the ROUGE evaluator
undoes them when scoring a ``.tgt`` file."""
from __future__ import annotations

import re

ARTICLE_SEPARATOR = "|||||"
NEWLINE_MARK = "NEWLINE_CHAR"
SUMMARY_MARK = "– "  # Multi-News summaries start with an en dash and a space


def decode_newlines(text: str) -> str:
    """Multi-News ``NEWLINE_CHAR`` markers (with the spaces around them) back to line breaks."""
    return re.sub(rf" *{NEWLINE_MARK} *", "\n", text)


def encode_newlines(text: str) -> str:
    """Line breaks as ``NEWLINE_CHAR`` (the inverse of :func:`decode_newlines` for text without spaces at ends of
    lines), so that one example is one line."""
    return re.sub(r" *\r?\n *", f" {NEWLINE_MARK} ", text.strip())


def split_articles(document: str) -> list[str]:
    """The non-empty articles of a ``|||||``-separated document, newlines decoded and whitespace trimmed."""
    return [a for a in (decode_newlines(part).strip() for part in document.split(ARTICLE_SEPARATOR)) if a]


def clean_summary(summary: str) -> str:
    """A summary without Multi-News' leading "– " and with its newlines decoded."""
    text = decode_newlines(summary).strip()
    return text[len(SUMMARY_MARK.strip()):].strip() if text.startswith(SUMMARY_MARK.strip()) else text
