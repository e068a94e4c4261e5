"""A walkthrough's SPEC / VARIANT parameters name an embedded example, example:variant, or a spec path."""

import pytest

from porting_kit.errors import InputError
from porting_kit.notebooks import spec_from_parameter

SPEC = '''
VARIANTS = {"planted": "a planted fault"}
VARIANT = None
def reference(): return None
def candidate(): return None
def inputs(): return {}
'''


def test_a_path_is_a_spec_file_with_its_variant(tmp_path, monkeypatch):
    own = tmp_path / "my_port.py"
    own.write_text(SPEC)
    spec = spec_from_parameter(str(own), "planted")
    assert spec.name == str(own) and spec.module.VARIANT == "planted"
    monkeypatch.chdir(tmp_path)   # relative to the notebook's folder (the kernel's cwd)
    assert spec_from_parameter("my_port.py").module.VARIANT is None


def test_a_name_is_an_embedded_example_and_bad_input_is_one_clear_error(tmp_path):
    with pytest.raises(InputError, match="unknown example 'nope'"):
        spec_from_parameter("nope")
    with pytest.raises(InputError, match="spec file not found"):
        spec_from_parameter(str(tmp_path / "missing.py"))
    own = tmp_path / "my_port.py"
    own.write_text(SPEC)
    with pytest.raises(InputError, match="other"):
        spec_from_parameter(str(own), "other")
