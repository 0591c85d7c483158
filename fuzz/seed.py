"""Write a seed corpus for the native_bpe fuzz target from the shared conversations.

Each seed is one option byte (tokenizer and options) followed by a message text. The corpus is
generated (the conversations are not part of the repository): ``python fuzz/seed.py`` writes
``fuzz/corpus/native_bpe`` from ``$CHATIDS_DATA_DIR/conversations`` (default ../shared/data).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import random
import sys
from pathlib import Path

data = Path(os.environ.get("CHATIDS_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))
out = Path(__file__).resolve().parent / "corpus" / "native_bpe"
per_file = int(sys.argv[1]) if len(sys.argv) > 1 else 40

out.mkdir(parents=True, exist_ok=True)
rng = random.Random(0)
count = 0
for path in sorted(glob.glob(str(data / "conversations" / "*.jsonl"))):
    rows = [json.loads(line) for line in open(path, encoding="utf-8")]
    for row in rng.sample(rows, min(per_file, len(rows))):
        for m in row.get("messages", []):
            text = m.get("content")
            if isinstance(text, str) and text:
                seed = bytes([rng.randrange(256)]) + text[:2000].encode("utf-8")
                (out / hashlib.sha1(seed).hexdigest()).write_bytes(seed)
                count += 1
print(f"{count} seeds in {out}")
