"""What each command writes (lavo_zoo.outputs.kinds): a file name whose suffix names another format is refused."""
from __future__ import annotations

from pathlib import Path

import pytest

from lavo_zoo.errors import UsageError
from lavo_zoo.outputs import FIGURE, TEXT, WAV, check_writable


# ------------------------------------------------------------------------------------------------ the suffix
@pytest.mark.parametrize("name, kind, said", [
    ("x.mp3", WAV, "writes a WAV file, which .mp3 does not name; end it in .wav"),
    ("x", WAV, "a name without a suffix does not name; end it in .wav"),
    ("x.json", TEXT, ".json names another format"),
    ("x.mp3", FIGURE, ".mp3 names no image format"),
])
def test_a_file_name_whose_suffix_names_another_format_is_refused(tmp_path: Path, name: str, kind, said: str
                                                                  ) -> None:
    with pytest.raises(UsageError, match=said):
        check_writable(tmp_path / name, True, "--out", None, kind)

