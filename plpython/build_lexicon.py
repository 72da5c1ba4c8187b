"""Build the compact WordNet lexicon that emem's question analysis loads in each backend.

nltk's WordNetCorpusReader reads the whole WordNet index when it starts (about 1 s), too slow
for the first find of a fresh connection. At build time we read WordNet once through nltk and
keep only what lemmatisation needs: the lemma names of each part of speech and the exception
lists (`*.exc`). Debian's `wordnet-base` lacks the `lexnames` file nltk insists on; we ship it.
Runs with Debian 12's nltk 3.8 and Debian 13's 3.9 alike (tests/e2e/test_lexicon_nltk39.py).
"""

import argparse
import json
import shutil
import tempfile
import warnings
from pathlib import Path

from nltk.corpus.reader.wordnet import WordNetCorpusReader

PARTS_OF_SPEECH = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}


class UnmappedWordNetReader(WordNetCorpusReader):
    """nltk's reader without the mapping of synsets to WordNet 3.0 for the multilingual data.

    The reader builds that map when it starts: nltk 3.8 (`map_wn30`) only when the dictionary is
    not WordNet 3.0, but nltk 3.9 (`map_wn`) compares the version with the name "wordnet" and so
    always maps, which loads nltk's own downloadable WordNet (not shipped by Debian) and fails.
    No multilingual data is read here, so there is nothing to map.
    """

    def map_wn(self, version: str = "wordnet") -> None:
        return None

    def map_wn30(self) -> None:
        return None


def read_wordnet(staging: Path, wordnet_dir: Path, lexnames: Path) -> UnmappedWordNetReader:
    """Open WordNet through nltk, with our lexnames beside copies of Debian's dictionary files.

    Copies, not symbolic links: nltk 3.9.4 (PyPI's, not Debian 13's 3.9.1) refuses to open a file that resolves outside
    the reader's root ("Security Violation ... escapes root").
    """
    for entry in wordnet_dir.iterdir():
        if entry.is_file():
            shutil.copyfile(entry, staging / entry.name)
    shutil.copyfile(lexnames, staging / "lexnames")
    with warnings.catch_warnings():  # nltk warns that WordNet 3.0 has no multilingual data
        warnings.simplefilter("ignore")
        return UnmappedWordNetReader(str(staging), None)


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
