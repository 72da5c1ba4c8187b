"""The WordNet lexicon builds alike with Debian 12's nltk 3.8 and Debian 13's nltk 3.9.

nltk 3.9 from PyPI, in a virtual environment made from Debian's Python, stands in for Debian 13's
python3-nltk: its WordNetCorpusReader maps every dictionary to nltk's own downloadable WordNet when
it starts, which Debian does not ship, so a build that lets it fails on Debian 13 only.
"""

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = Path("/usr/bin/python3")  # the Python plpython3u and the Makefile run
# Debian 13's python3-nltk, and PyPI's newest 3.9 (3.9.4 refuses files that resolve outside its root).
NLTK_39_RELEASES = ["nltk==3.9.1", "nltk>=3.9,<3.10"]


def run(command: list[str]) -> str:
    """Its standard output; a failure shows its standard error."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{command} failed with exit code {done.returncode}:\n{done.stderr[-3000:]}"
    return done.stdout


def build_lexicon(python: Path, out: Path) -> bytes:
    """The lexicon the Makefile's rule builds, built by `python` with its own nltk."""
    run(
        [
            str(python),
            str(ROOT / "plpython/build_lexicon.py"),
            "--wordnet",
            "/usr/share/wordnet",  # Debian's wordnet-base, as the Makefile's WORDNET_DIR
            "--lexnames",
            str(ROOT / "plpython/wordnet/lexnames"),
            "--out",
            str(out),
        ]
    )
    return out.read_bytes()


def nltk_version(python: Path) -> str:
    return run([str(python), "-c", "import nltk; print(nltk.__version__)"]).strip()


@pytest.mark.parametrize("nltk_39", NLTK_39_RELEASES)
def test_nltk_39_builds_the_lexicon_debians_nltk_builds(tmp_path: Path, nltk_39: str) -> None:
    environment = tmp_path / "nltk39"
    run([str(SYSTEM_PYTHON), "-m", "venv", str(environment)])
    python = environment / "bin/python"
    run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", nltk_39])
    assert nltk_version(python).startswith("3.9.")
    with_nltk_39 = build_lexicon(python, tmp_path / "lexicon-nltk39.json")
    with_debians_nltk = build_lexicon(SYSTEM_PYTHON, tmp_path / "lexicon-debian.json")
    assert with_nltk_39 == with_debians_nltk
    assert b'"wordnet_version":"3.0"' in with_nltk_39
