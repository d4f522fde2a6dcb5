"""trainers.flag_table: the documentation's flag table is the one the presets and help table give."""

import os

from configs import finetune, pretrain
from trainers import flag_table
from trainers.fields import FIELDS


def test_the_flags_page_table_is_the_generated_one():
    with open(flag_table.PAGE, encoding="utf-8") as f:
        table = flag_table.page_table(f.read())
    assert table is not None, "docs/reference/flags.md lost its flag-table markers"
    assert table == flag_table.markdown(), "run: python -m trainers.flag_table --write"


def test_every_preset_field_has_help_and_appears_once():
    table = flag_table.markdown()
    for name in set(finetune.get_config()) | set(pretrain.get_config()):
        assert FIELDS[name].help, f"--{name} has no help text in trainers/fields.py"
        assert table.count(f"| `--{name}` |") == 1


def test_write_replaces_only_the_table(tmp_path):
    page = tmp_path / "flags.md"
    page.write_text(f"intro\n{flag_table.BEGIN}\nstale\n{flag_table.END}\noutro\n")
    flag_table.write_page(str(page))
    text = page.read_text()
    assert text.startswith("intro\n") and text.endswith("outro\n")
    assert flag_table.page_table(text) == flag_table.markdown()
    assert os.listdir(tmp_path) == ["flags.md"]  # no temporary file left behind
