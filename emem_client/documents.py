"""The text of documents, as blocks, and the chunks ingest cuts from them.

Markdown and MDX are read by markdown-it-py (CommonMark with tables), HTML by Beautiful Soup:
each document becomes blocks (headings, paragraphs, code), so that a fenced or preformatted code
block stays whole, line breaks and all, and a heading stays with the text it introduces. MDX's
`import`/`export` lines and JSX elements are left out; plain text is split at blank lines.
"""

import re
import textwrap
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import Enum

from bs4 import BeautifulSoup
from bs4.element import Comment, NavigableString, Tag
from markdown_it import MarkdownIt
from markdown_it.token import Token

MARKDOWN_SUFFIXES = frozenset({".md", ".markdown"})
MDX_SUFFIXES = frozenset({".mdx"})
HTML_SUFFIXES = frozenset({".html", ".htm", ".xhtml"})
PLAIN_SUFFIXES = frozenset({".txt", ".text", ".rst"})
DOCUMENT_SUFFIXES = MARKDOWN_SUFFIXES | MDX_SUFFIXES | HTML_SUFFIXES | PLAIN_SUFFIXES
PARAGRAPH_BREAK = "\n\n"
HEADING_CHARS = 100


class BlockKind(Enum):
    HEADING = "heading"
    TEXT = "text"
    CODE = "code"  # kept whole: never re-wrapped, never cut


@dataclass(frozen=True)
class Block:
    text: str
    kind: BlockKind = BlockKind.TEXT


@dataclass(frozen=True)
class Document:
    title: str | None
    blocks: list[Block]


def read_document(text: str, suffix: str) -> Document:
    """The blocks of a document by its kind (its file suffix, lower case)."""
    if suffix in HTML_SUFFIXES:
        return html_document(text)
    if suffix in MARKDOWN_SUFFIXES | MDX_SUFFIXES:
        return Document(None, markdown_blocks(without_mdx_lines(text) if suffix in MDX_SUFFIXES else text))
    return Document(None, plain_blocks(text))


# ---- Markdown and MDX --------------------------------------------------------------------------

_markdown = MarkdownIt("commonmark").enable("table")
# MDX: ES module lines at the top level (outside code fences) are code of the page, not its text.
MDX_MODULE_LINE = re.compile(r"^(import|export)\s")
FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")


def without_mdx_lines(text: str) -> str:
    lines, fence = [], None
    for line in text.splitlines():
        opened = FENCE.match(line)
        if opened and (fence is None or opened[1][0] == fence[0]):
            fence = None if fence else opened[1]
        if fence is None and not opened and MDX_MODULE_LINE.match(line):
            continue
        lines.append(line)
    return "\n".join(lines)


def markdown_blocks(text: str) -> list[Block]:
    tokens = _markdown.parse(text)
    blocks: list[Block] = []
    for index, token in enumerate(tokens):
        if token.type in ("fence", "code_block"):
            blocks.append(Block(token.content.rstrip("\n"), BlockKind.CODE))
        elif token.type == "inline" and index > 0:
            opener = tokens[index - 1].type
            kind = BlockKind.HEADING if opener == "heading_open" else BlockKind.TEXT
            words = inline_text(token)
            if words:
                blocks.append(Block(words, kind))
    return blocks


def inline_text(token: Token) -> str:
    """The readable words of an inline token: text and code spans, without markup or raw HTML (JSX)."""
    parts = [
        child.content if child.type in ("text", "code_inline") else " "
        for child in token.children or []
        if child.type in ("text", "code_inline", "softbreak", "hardbreak")
    ]
    return " ".join("".join(parts).split())


# ---- HTML --------------------------------------------------------------------------------------

HEADING_TAGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
# Elements inside a paragraph's text; any other element is a block of its own (or holds blocks).
INLINE_TAGS = frozenset(
    "a abbr b bdi bdo cite code data del dfn em font i img ins kbd label mark q s samp small span strong sub sup "
    "time tt u var wbr".split()
)
SKIPPED_TAGS = frozenset(
    {"head", "title", "script", "style", "noscript", "template", "nav", "header", "footer", "svg", "button", "form"}
)


def html_document(html: str) -> Document:
    soup = BeautifulSoup(html, "html.parser")
    title = " ".join(soup.title.get_text().split()) if soup.title else None
    return Document(title or None, list(html_blocks(soup)))


def is_navigation(element: Tag) -> bool:
    classes: list[str] = list(element.get_attribute_list("class"))
    return any(str(name).lower().startswith("nav") for name in classes)


def html_blocks(element: Tag) -> Iterator[Block]:
    """Blocks in document order: a block element's own text is a paragraph, `pre` is code (whole)."""
    inline: list[str] = []

    def flush() -> Iterator[Block]:
        words = " ".join("".join(inline).split())
        inline.clear()
        if words:
            yield Block(words)

    for child in element.children:
        if isinstance(child, Comment):
            continue
        if isinstance(child, NavigableString):
            inline.append(str(child))
        elif not isinstance(child, Tag) or child.name in SKIPPED_TAGS or is_navigation(child):
            continue
        elif child.name == "pre":
            yield from flush()
            yield Block(child.get_text().strip("\n"), BlockKind.CODE)
        elif child.name in HEADING_TAGS:
            yield from flush()
            heading = " ".join(child.get_text().split())
            if heading:
                yield Block(heading, BlockKind.HEADING)
        elif child.name in ("br", "hr"):
            inline.append("\n")
        elif child.name in ("td", "th"):
            inline.append(f" {child.get_text(' ')} ")
        elif child.name in INLINE_TAGS:
            inline.append(child.get_text())
        else:
            yield from flush()
            yield from html_blocks(child)
    yield from flush()


# ---- plain text ----------------------------------------------------------------------------------


def plain_blocks(text: str) -> list[Block]:
    """Paragraphs split at blank lines, whitespace collapsed; a short line that ends no sentence is a heading."""
    blocks = []
    for part in re.split(r"\n\s*\n", text):
        words = " ".join(part.split())
        if words:
            blocks.append(Block(words, BlockKind.HEADING if looks_like_heading(words) else BlockKind.TEXT))
    return blocks


def looks_like_heading(paragraph: str) -> bool:
    """A short line that ends no sentence: a title, or a term such as `max_wal_senders (integer)`."""
    return len(paragraph) <= HEADING_CHARS and not paragraph.endswith((".", "!", "?", ":", ";", ","))


# ---- chunks ------------------------------------------------------------------------------------


def chunks_of(blocks: Iterable[Block], chunk_chars: int) -> list[str]:
    """Chunks of at most `chunk_chars` characters, cut between blocks where possible, each heading kept
    with the block it introduces; a code block longer than a chunk is a chunk of its own, whole."""
    return [chunk for chunk, _ in pack(headed_pieces(blocks, chunk_chars), chunk_chars, PARAGRAPH_BREAK)]


def chunk_text(text: str, chunk_chars: int) -> list[str]:
    """The chunks of a plain text."""
    return chunks_of(plain_blocks(text), chunk_chars)


def split_long(paragraph: str, limit: int) -> list[str]:
    """A paragraph longer than `limit` cut at sentence ends, and at spaces where a sentence is too long."""
    if len(paragraph) <= limit:
        return [paragraph]
    pieces: list[str] = []
    for sentence in re.split(r"(?<=[.!?])\s+", paragraph):
        pieces.extend(textwrap.wrap(sentence, limit, break_on_hyphens=False) if len(sentence) > limit else [sentence])
    return [chunk for chunk, _ in pack([(piece, False) for piece in pieces], limit, " ")]


def headed_pieces(blocks: Iterable[Block], limit: int) -> list[tuple[str, bool]]:
    """(piece, whether it starts with a heading): headings are glued to the block they introduce."""
    pieces: list[tuple[str, bool]] = []
    heading = ""
    for block in blocks:
        if block.kind is BlockKind.HEADING and len(heading) + len(block.text) < limit // 2:
            heading = f"{heading}{PARAGRAPH_BREAK}{block.text}" if heading else block.text
            continue
        room = limit - len(heading) - len(PARAGRAPH_BREAK)
        parts = [block.text] if block.kind is BlockKind.CODE else split_long(block.text, max(room, limit // 2))
        if heading:
            parts[0] = f"{heading}{PARAGRAPH_BREAK}{parts[0]}"
        pieces.extend((part, bool(heading) and n == 0) for n, part in enumerate(parts))
        heading = ""
    if heading:
        pieces.append((heading, True))
    return pieces


def pack(pieces: Iterable[tuple[str, bool]], limit: int, separator: str) -> list[tuple[str, bool]]:
    """Consecutive pieces joined while the result stays within `limit` characters; a piece that
    starts with a heading starts a new chunk unless the current one is still short."""
    chunks: list[tuple[str, bool]] = []
    for piece, headed in pieces:
        fits = chunks and len(chunks[-1][0]) + len(separator) + len(piece) <= limit
        if fits and not (headed and len(chunks[-1][0]) >= limit // 3):
            chunks[-1] = (chunks[-1][0] + separator + piece, chunks[-1][1])
        else:
            chunks.append((piece, headed))
    return chunks
