"""Build the compact WordNet lexicon that emem's question analysis loads in each backend.

nltk's WordNetCorpusReader reads the whole WordNet index when it starts (about 1 s), too slow
for the first find of a fresh connection. At build time we read WordNet once through nltk and
keep only what lemmatisation needs: the lemma names of each part of speech and the exception
lists (`*.exc`). Debian's `wordnet-base` lacks the `lexnames` file nltk insists on; we ship it.
"""

import argparse
import json
import os
import tempfile
import warnings
from pathlib import Path

from nltk.corpus.reader.wordnet import WordNetCorpusReader

PARTS_OF_SPEECH = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}


def read_wordnet(staging: Path, wordnet_dir: Path, lexnames: Path) -> WordNetCorpusReader:
    """Open WordNet through nltk, with our lexnames beside Debian's dictionary files."""
    for entry in wordnet_dir.iterdir():
        if entry.is_file():
            os.symlink(entry.resolve(), staging / entry.name)
    os.symlink(lexnames.resolve(), staging / "lexnames")
    with warnings.catch_warnings():  # nltk warns that WordNet 3.0 has no multilingual data
        warnings.simplefilter("ignore")
        return WordNetCorpusReader(str(staging), None)


def build_lexicon(reader: WordNetCorpusReader) -> dict:
    """Single-word lemma names per part of speech (questions are lemmatised word by word)."""
    lemmas: dict[str, list[str]] = {}
    exceptions: dict[str, dict[str, list[str]]] = {}
    for pos, name in PARTS_OF_SPEECH.items():
        names = set(reader.all_lemma_names(pos))
        if pos == "a":  # satellite adjectives are adjectives too
            names |= set(reader.all_lemma_names("s"))
        lemmas[pos] = sorted(n for n in names if "_" not in n)
        exception_file = reader.open(f"{name}.exc")
        exceptions[pos] = {
            fields[0]: fields[1:] for fields in (line.split() for line in exception_file) if len(fields) > 1
        }
    return {"wordnet_version": reader.get_version(), "lemmas": lemmas, "exceptions": exceptions}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wordnet", type=Path, required=True, help="WordNet dictionary folder")
    parser.add_argument("--lexnames", type=Path, required=True, help="the lexnames file to add")
    parser.add_argument("--out", type=Path, required=True, help="the lexicon JSON to write")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="emem-wordnet-") as staging:
        lexicon = build_lexicon(read_wordnet(Path(staging), args.wordnet, args.lexnames))
    args.out.write_text(json.dumps(lexicon, separators=(",", ":")))


if __name__ == "__main__":
    main()
