"""Builds emem-client with the version of emem.control: the client follows the extension's release,
and emem.control stays the one place the version is written."""

import re
from pathlib import Path

from setuptools import setup

CONTROL = Path(__file__).resolve().with_name("emem.control")


def extension_version() -> str:
    found = re.search(r"^default_version\s*=\s*'([^']+)'", CONTROL.read_text(encoding="utf-8"), re.MULTILINE)
    if found is None:
        raise SystemExit(f"{CONTROL} names no default_version")
    return found[1]


setup(version=extension_version())
