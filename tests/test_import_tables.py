"""What the importers share: each framework's mapping table in docs/import.md is the one its code applies, and every
default an importer fills in is a key its rules map."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from rlsim.importers import nemo_rl, verl
from rlsim.importers.mapping import markdown_table

DOCS = Path(__file__).parents[1] / "docs" / "import.md"
FRAMEWORKS = [(verl, "verl", "verl"), (nemo_rl, "nemo-rl", "NeMo-RL")]


@pytest.mark.parametrize(("importer", "tag", "title"), FRAMEWORKS, ids=[tag for _, tag, _ in FRAMEWORKS])
def test_the_docs_table_is_the_code_mapping(importer, tag, title):
    text = DOCS.read_text(encoding="utf-8")
    table = re.search(rf"<!-- table: {re.escape(tag)} .*?-->\n(.*?)\n<!-- end table -->", text, re.S)
    assert table is not None and table.group(1) == markdown_table(importer.RULES, title)


@pytest.mark.parametrize(("importer", "tag", "title"), FRAMEWORKS, ids=[tag for _, tag, _ in FRAMEWORKS])
def test_every_default_is_a_mapped_key(importer, tag, title):
    assert set(importer.DEFAULTS) <= {rule.key for rule in importer.RULES}
