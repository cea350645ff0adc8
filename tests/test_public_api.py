import importlib

import llama_index_hiqa


def test_every_public_name_imports_from_the_top_level():
    for name in llama_index_hiqa.__all__:
        assert getattr(llama_index_hiqa, name) is not None, name


def test_import_is_light():
    import subprocess
    import sys

    code = "import sys, llama_index_hiqa; print('torch' in sys.modules, 'fitz' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_unknown_name_is_an_attribute_error():
    import pytest

    with pytest.raises(AttributeError):
        importlib.import_module("llama_index_hiqa").NoSuchThing
