"""transformers' own chat-template tests (``TokenizerTesterMixin`` of the vendored
``test_tokenization_common.py``) on shared checkpoints. Written by chatids, not vendored: it only
points transformers' mixin at local tokenizer folders (``CHATIDS_MODELS_DIR``), as each
``tests/models/*/test_tokenization_*.py`` of transformers points it at a Hub repo.
``tests/test_hf_transformers_suite.py`` of chatids runs these with and without
``chatids.hf.patch_all()`` (see ``conftest.py``) and compares the outcomes test by test."""

import os
import unittest

from transformers import AutoTokenizer

from .test_tokenization_common import TokenizerTesterMixin

MODELS_DIR = os.environ.get("CHATIDS_MODELS_DIR", "")


def _case(folder: str) -> type:
    path = os.path.join(MODELS_DIR, folder)
    if not os.path.isdir(path):

        @unittest.skip(f"{path} not found (set CHATIDS_MODELS_DIR)")
        class Missing(unittest.TestCase):
            def test_missing(self) -> None: ...

        return Missing
    cls = type(AutoTokenizer.from_pretrained(path))

    class Case(TokenizerTesterMixin, unittest.TestCase):
        tokenizer_class = cls
        from_pretrained_id = path

    return Case


# Qwen2.5 always; the others with CHATIDS_CONFORMANCE=full (each costs about a minute).
FULL = os.environ.get("CHATIDS_CONFORMANCE") == "full"
Qwen25Test = _case("qwen2.5-7b-instruct")
if FULL:
    Llama31Test = _case("llama-3.1-8b-instruct")
    Gemma3Test = _case("gemma-3-it")
    Mistral03Test = _case("mistral-7b-instruct-v0.3")
