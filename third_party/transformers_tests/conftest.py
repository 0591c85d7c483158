"""chatids' switch for the vendored transformers tests (written by chatids, not vendored).

``CHATIDS_HF_PATCH=1`` turns on ``chatids.hf.patch_all()`` before any test runs, so every
tokenizer the tests load is served by chatids; ``CHATIDS_HF_STATS=FILE`` writes
``chatids.hf.stats()`` there at the end of the session."""

import json
import os


def pytest_configure(config):
    if os.environ.get("CHATIDS_HF_PATCH") == "1":
        import chatids.hf

        chatids.hf.patch_all()


def pytest_sessionfinish(session, exitstatus):
    out = os.environ.get("CHATIDS_HF_STATS")
    if out:
        import chatids.hf

        with open(out, "w") as fh:
            json.dump({"patched": chatids.hf.is_patched(), **chatids.hf.stats()}, fh, indent=1)
