"""`burtorch-bench --paper` takes the paper's data sets by name from burtorch's data cache."""
import shutil

import pytest

from burtorch_bench import cli


def test_paper_preset_uses_the_cache_with_both_data_sets(shared_data, tmp_path, monkeypatch):
    for name in ("names.txt", "tinyshakespeare.txt"):
        shutil.copy(shared_data / name, tmp_path / name)
    monkeypatch.setenv("BURTORCH_DATA", str(tmp_path))
    monkeypatch.setenv("BURTORCH_DATA_MIRROR", "http://127.0.0.1:9/none")  # nothing is downloaded
    assert cli._paper_data() == str(tmp_path)


def test_paper_preset_offline_says_where_to_put_the_data(tmp_path, monkeypatch):
    monkeypatch.setenv("BURTORCH_DATA", str(tmp_path))
    monkeypatch.setenv("BURTORCH_DATA_MIRROR", "http://127.0.0.1:9/none")
    with pytest.raises(SystemExit) as e:
        cli._paper_data()
    assert "names.txt" in str(e.value) and str(tmp_path / "names.txt") in str(e.value)
    assert list(tmp_path.iterdir()) == []
