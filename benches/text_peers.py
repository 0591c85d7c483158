"""Text encoders side by side, one thread, CPU time: chatids' native core against the exact peers.

Every message content of the shared corpus (about 45,000 texts), each text encoded once per run
("cold": every encoder freshly built for the run, load time excluded), then once more with the
same encoders ("warm": the texts seen before, as system prompts, few-shot blocks and tool schemas
are in serving). The peers: the ``tokenizers`` package (the reference of the ids), fastokens,
gigatoken, and tiktoken where the tokenizer is a byte-level BPE with a tiktoken pattern (Llama
3.1, Qwen2.5; its ranks are built here from ``tokenizer.json``). Each encoder gets one Python call
per text; "(one call)" rows give all the texts in one call instead: chatids' ``_encode_texts``,
which counts the tokens without returning them, and the peers' batch calls on one thread, which
return them as flat buffers (fastokens' ``encode_batch_flat``, gigatoken's ``encode_batch``). Each peer's ids are compared with
the ``tokenizers`` package's on every text first; the table counts the texts that differ.

CPU time is ``time.process_time()`` (every thread of the process), so an encoder that spreads one
call over threads is charged for all of them. Runs are interleaved (chatids, peers, chatids, ...)
and the table gives the median M tokens per CPU second of ``--repeats`` runs.

Run: ``make bench-text-peers`` (``python benches/text_peers.py``; CHATIDS_MODELS_DIR and
CHATIDS_DATA_DIR set; the peers are in requirements-bench.txt).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# numpy's OpenBLAS threads spin on another core after import, and CPU time would count them.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

MODELS = ["llama-3.1-8b-instruct", "qwen2.5-7b-instruct", "llama-2-7b-chat", "gemma-3-it"]

#: tiktoken patterns of the byte-level BPE tokenizers it can reproduce (their pre-tokenizer regex).
TIKTOKEN_PATTERNS = {
    "llama-3.1-8b-instruct": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2.5-7b-instruct": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}


def corpus_texts() -> list[str]:
    base = Path(os.environ["CHATIDS_DATA_DIR"]) / "conversations"
    texts = []
    for f in sorted(glob.glob(str(base / "*.jsonl"))):
        for line in open(f, encoding="utf-8"):
            for m in json.loads(line)["messages"]:
                if isinstance(m.get("content"), str) and m["content"]:
                    texts.append(m["content"])
    return texts


def tiktoken_encoding(tokenizer_json: Path, pattern: str) -> Any:
    """A tiktoken Encoding with the byte-level BPE's ranks (GPT-2's byte-to-unicode map undone)."""
    import tiktoken

    vocab = json.loads(tokenizer_json.read_text(encoding="utf-8"))["model"]["vocab"]
    printable = set(range(ord("!"), ord("~") + 1)) | set(range(ord("¡"), ord("¬") + 1)) | set(range(ord("®"), ord("ÿ") + 1))
    to_byte = {chr(b): b for b in printable}
    to_byte.update({chr(256 + k): b for k, b in enumerate(b for b in range(256) if b not in printable)})
    ranks = {bytes(to_byte[ch] for ch in token): rank for token, rank in vocab.items()}
    return tiktoken.Encoding("peer", pat_str=pattern, mergeable_ranks=ranks, special_tokens={})


def encoders(name: str, path: Path) -> dict[str, Callable[[], Callable[[list[str]], list[list[int]]]]]:
    """Encoder name -> a builder of a fresh encoder: a function from texts to their ids."""
    import tokenizers

    import chatids

    file = path / "tokenizer.json"
    out: dict[str, Callable[[], Callable[[list[str]], list[list[int]]]]] = {}

    def chatids_native() -> Callable[[list[str]], list[list[int]]]:
        core = chatids.Encoder.from_pretrained(path)._core
        return lambda texts: [core._encode_text(t, "native")[0] for t in texts]

    def chatids_count() -> Callable[[list[str]], int]:
        core = chatids.Encoder.from_pretrained(path)._core
        return lambda texts: core._encode_texts(texts, "native")

    out["chatids"] = chatids_native
    out["chatids (one call)"] = chatids_count  # type: ignore[assignment]

    def hf() -> Callable[[list[str]], list[list[int]]]:
        tok = tokenizers.Tokenizer.from_file(str(file))
        return lambda texts: [tok.encode(t, add_special_tokens=False).ids for t in texts]

    out["tokenizers"] = hf
    try:
        import fastokens

        def fast() -> Callable[[list[str]], list[list[int]]]:
            tok = fastokens.Tokenizer.from_file(str(file))
            return lambda texts: [tok.encode(t, add_special_tokens=False).ids for t in texts]

        def fast_batch() -> Callable[[list[str]], list[list[int]]]:
            tok = fastokens.Tokenizer.from_file(str(file))
            return lambda texts: tok.encode_batch_flat(texts, add_special_tokens=False)

        out["fastokens"] = fast
        out["fastokens (one call)"] = fast_batch
    except ImportError:
        pass
    try:
        import gigatoken

        def giga() -> Callable[[list[str]], list[list[int]]]:
            tok = gigatoken.Tokenizer(str(file))
            return lambda texts: [list(tok.encode(t)) for t in texts]

        def giga_batch() -> Callable[[list[str]], list[list[int]]]:
            tok = gigatoken.Tokenizer(str(file))
            return lambda texts: tok.encode_batch(texts, parallel=False)

        out["gigatoken"] = giga
        out["gigatoken (one call)"] = giga_batch
    except ImportError:
        pass
    if name in TIKTOKEN_PATTERNS:
        try:
            import tiktoken  # noqa: F401

            def tk() -> Callable[[list[str]], list[list[int]]]:
                enc = tiktoken_encoding(file, TIKTOKEN_PATTERNS[name])
                return lambda texts: [enc.encode_ordinary(t) for t in texts]

            out["tiktoken"] = tk
        except ImportError:
            pass
    return out


def as_lists(result: Any) -> list[list[int]]:
    """The ids of a batch call as lists: fastokens' flat buffers (ids, offsets), gigatoken's
    awkward array, or lists already."""
    if isinstance(result, tuple):
        import numpy as np

        ids = np.frombuffer(result[0], np.uint32)
        offsets = np.frombuffer(result[1], np.uint64)
        return [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])]
    if hasattr(result, "tolist"):
        return result.tolist()
    return result


def cpu(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.process_time()
    result = fn()
    return time.process_time() - t0, result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=MODELS)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--limit", type=int, default=None, help="only the first N texts (a quick look)")
    args = ap.parse_args()
    texts = corpus_texts()[: args.limit]
    print(f"{len(texts)} texts, one thread (RAYON_NUM_THREADS={os.environ['RAYON_NUM_THREADS']}), "
          f"M tokens per CPU second, medians of {args.repeats} interleaved runs\n")
    rows: dict[str, dict[str, str]] = {}
    names: list[str] = []
    for model in args.models:
        path = Path(os.environ["CHATIDS_MODELS_DIR"]) / model
        builders = encoders(model, path)
        reference = builders["tokenizers"]()(texts)
        tokens = sum(len(ids) for ids in reference)
        differing: dict[str, Optional[int]] = {}
        for enc_name, build in builders.items():
            if enc_name in ("tokenizers", "chatids (one call)"):
                continue
            ids = as_lists(build()(texts))
            differing[enc_name] = sum(1 for a, b in zip(ids, reference) if list(a) != list(b))
        cold: dict[str, list[float]] = {n: [] for n in builders}
        warm: dict[str, list[float]] = {n: [] for n in builders}
        for _ in range(args.repeats):
            for enc_name, build in builders.items():
                encode = build()
                t_cold, _ = cpu(lambda: encode(texts))
                t_warm, _ = cpu(lambda: encode(texts))
                cold[enc_name].append(t_cold)
                warm[enc_name].append(t_warm)
        row = {}
        for enc_name in builders:
            c = tokens / statistics.median(cold[enc_name]) / 1e6
            w = tokens / statistics.median(warm[enc_name]) / 1e6
            diff = differing.get(enc_name)
            row[enc_name] = f"{c:.1f} / {w:.1f}" + ("" if diff is None else f" ({diff} differ)")
            if enc_name not in names:
                names.append(enc_name)
        rows[model] = row
        print(f"{model}: {tokens:,} tokens; " + "; ".join(f"{n} {v}" for n, v in row.items()), flush=True)
    print("\ncold / warm, M tokens per CPU second (texts whose ids differ from the tokenizers package)\n")
    print("| encoder | " + " | ".join(rows) + " |")
    print("|---|" + "---|" * len(rows))
    for n in names:
        print(f"| {n} | " + " | ".join(rows[m].get(n, "—") for m in rows) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
