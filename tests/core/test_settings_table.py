"""Each setting is documented once, in its field, and docs/api.md shows exactly that."""
import dataclasses
from pathlib import Path

import pytest

from mindwatch import MonitorSettings
from mindwatch.report.settings_table import (
    END_MARKER,
    REGENERATE,
    START_MARKER,
    documented_fields,
    main,
    render_table,
    replace_table,
    table_in,
)

API_DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def test_every_setting_has_a_doc():
    fields = documented_fields()
    assert [f.name for f in fields] == [f.name for f in dataclasses.fields(MonitorSettings)
                                        if f.init]
    undocumented = [f.name for f in fields if not str(f.metadata.get("doc") or "").strip()]
    assert not undocumented, (f"settings without documentation: {undocumented}; declare them "
                              "with setting(default, doc, unit) in src/mindwatch/settings.py")


def test_api_doc_table_matches_the_settings():
    text = API_DOC.read_text(encoding="utf-8")
    assert table_in(text) == render_table(), (
        f"the settings table in {API_DOC.name} is out of date; regenerate it: {REGENERATE}")


def test_table_has_one_row_per_setting_with_default_and_unit():
    rows = render_table().splitlines()[2:]
    assert len(rows) == len(documented_fields())
    assert rows[0].startswith("| `print_interval` | `10` | steps | ")
    assert any(row.startswith("| `batch_size` | `None` | samples | ") for row in rows)
    assert any(row.startswith("| `tensorboard` | `False` | - | ") for row in rows)


def test_undocumented_setting_fails_to_render():
    @dataclasses.dataclass(kw_only=True)
    class Partly:
        documented: int = dataclasses.field(default=1, metadata={"doc": "yes", "unit": "s"})
        bare: int = 2

    with pytest.raises(ValueError, match="'bare' has no documentation"):
        render_table(Partly)


def test_write_and_check_replace_only_the_table(tmp_path, capsys):
    doc = tmp_path / "api.md"
    doc.write_text(f"# API\n\nintro\n\n{START_MARKER}\nstale | table\n{END_MARKER}\n\nafter\n")
    assert main(["--check", str(doc)]) == 1
    assert "make docs" in capsys.readouterr().err
    assert main(["--write", str(doc)]) == 0
    text = doc.read_text()
    assert text.startswith("# API\n\nintro\n\n") and text.endswith(f"{END_MARKER}\n\nafter\n")
    assert table_in(text) == render_table() and "stale" not in text
    assert main(["--check", str(doc)]) == 0
    assert replace_table(text) == text          # idempotent


def test_missing_markers_are_an_error(tmp_path, capsys):
    doc = tmp_path / "api.md"
    doc.write_text("# API without a table\n")
    assert main(["--write", str(doc)]) == 2
    assert "settings-table:start" in capsys.readouterr().err
    assert doc.read_text() == "# API without a table\n"
