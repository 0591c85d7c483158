"""Encoders pickle by value: the tokenizer and the template travel with them.

Unpickling reads no checkpoint file (every round trip here loads from a copy of the checkpoint
that is deleted before unpickling) and downloads nothing, so an encoder can be sent to
``multiprocessing`` workers (spawn and fork), ``datasets.Dataset.map(num_proc=...)`` processes
and Ray tasks. The unpickled encoder must give the same ids, text, stop ids, format and
explanation as the original, on both routes, on the Jinja path, with the jinja2 fallback and
for GGUF files; its own pickle must be byte-for-byte the same state (so the state is
deterministic, which ``datasets``' fingerprints rely on).

The pickled sizes are printed by ``test_zz_sizes`` (run with ``-s`` to see them).
"""

from __future__ import annotations

import datetime as dt
import json
import multiprocessing
import os
import pickle
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest

import support

import chatids
from chatids import _core
from chatids._encoder import _encoder_from_state

#: Pickled size in bytes per case, printed by test_zz_sizes.
SIZES: dict[str, int] = {}

NOW = dt.datetime(*support.FROZEN_NOW)

#: Conversations every round trip compares (plus a sample of the corpus).
FIXED: list[list[dict]] = [
    [{"role": "user", "content": "Hello!"}],
    [
        {"role": "system", "content": "  Be brief.\n"},
        {"role": "user", "content": "Why? <|eot_id|> <|im_end|> [INST] <start_of_turn>"},
        {"role": "assistant", "content": "Because 你好 🙂\n"},
        {"role": "user", "content": " trailing "},
    ],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
    [{"role": "user", "content": "x"}, {"role": "user", "content": "y"}],
]


def conversations() -> list[list[dict]]:
    rows = [r["messages"] for f in support.corpus_files() for r in support.corpus_rows(f)[:2]]
    return FIXED + rows


def outcome(call) -> Any:
    """The result of `call()`, or the error it raised (type and message)."""
    try:
        result = call()
    except Exception as e:  # noqa: BLE001 - the same error on both sides is the expectation
        return ("raised", type(e).__name__, str(e))
    return result.tolist() if hasattr(result, "tolist") else result


def template_kwargs(enc: chatids.Encoder, fmt: str) -> dict[str, Any]:
    kw: dict[str, Any] = {"now": NOW}
    if enc.reference == "transformers":
        kw.update(support.template_kwargs(fmt))
    return kw


def assert_same(enc: chatids.Encoder, back: chatids.Encoder, kwargs: dict[str, Any]) -> int:
    """Everything observable is equal; returns the number of conversations encoded."""
    assert type(back) is type(enc)
    assert back.format == enc.format
    assert back.reference == enc.reference
    assert back.stop_token_ids == enc.stop_token_ids
    assert back.control_tokens == enc.control_tokens
    assert back.reads_clock == enc.reads_clock
    assert back.explain() == enc.explain()
    for attr in ("chat_template", "special_tokens_map", "template_args", "unknown_template_args", "needs_external_renderer"):
        assert getattr(back._core, attr) == getattr(enc._core, attr), attr
    if enc.reference == "transformers":
        assert back._core.tokenizer_json() == enc._core.tokenizer_json()
    encoded = []
    for messages in conversations():
        for agp in (False, True):
            for sanitize in (True, False):
                mine = outcome(lambda: enc.encode(messages, agp, sanitize, **kwargs))
                assert outcome(lambda: back.encode(messages, agp, sanitize, **kwargs)) == mine
                if agp and sanitize and not isinstance(mine, tuple):
                    encoded.append((messages, mine))
            text = outcome(lambda: enc.render(messages, agp, **kwargs))
            assert outcome(lambda: back.render(messages, agp, **kwargs)) == text
    assert encoded, "no conversation could be encoded"
    batch = back.encode_batch([m for m, _ in encoded], add_generation_prompt=True, **kwargs)
    assert [row.tolist() for row in batch] == [ids for _, ids in encoded]
    return len(encoded)


def round_trip(enc: chatids.Encoder, key: str, kwargs: dict[str, Any], delete: Path) -> chatids.Encoder:
    """Pickle `enc`, delete `delete` (what it was loaded from), unpickle and compare."""
    state = pickle.dumps(enc)
    SIZES[key] = len(state)
    if delete.is_dir():
        shutil.rmtree(delete)
    else:
        delete.unlink()
    back = pickle.loads(state)
    assert_same(enc, back, kwargs)
    assert pickle.dumps(back) == state, "the state of the unpickled encoder differs"
    return back


def copy_checkpoint(name: str, tmp_path: Path) -> Path:
    copy = tmp_path / name
    shutil.copytree(support.require_model_path(name), copy)
    return copy


@pytest.mark.parametrize("name", support.MODEL_NAMES)
def test_round_trip(name: str, tmp_path: Path) -> None:
    copy = copy_checkpoint(name, tmp_path)
    enc = chatids.Encoder.from_pretrained(copy)
    round_trip(enc, name, template_kwargs(enc, support.MODELS[name][0]), copy)


@pytest.mark.parametrize("name", ["llama-3.1-8b-instruct", "qwen3-0.6b", "mistral-small-24b-instruct-2501"])
def test_round_trip_generic_path(name: str, tmp_path: Path) -> None:
    copy = copy_checkpoint(name, tmp_path)
    enc = chatids.Encoder.from_pretrained(copy, format="jinja")
    assert enc.format == "jinja"
    back = round_trip(enc, f"{name} [jinja]", template_kwargs(enc, "jinja"), copy)
    assert back.reads_clock == (name == "mistral-small-24b-instruct-2501")


def test_round_trip_jinja2_fallback(tmp_path: Path) -> None:
    from test_generic import AUTOESCAPE_CHATML

    copy = copy_checkpoint("qwen2.5-7b-instruct", tmp_path)
    with pytest.warns(RuntimeWarning, match="cannot compile this chat template"):
        enc = chatids.Encoder.from_pretrained(copy, chat_template=AUTOESCAPE_CHATML)
    assert enc.format == "jinja2-fallback"
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # unpickling does not warn again
        back = round_trip(enc, "qwen2.5 [jinja2 fallback]", {}, copy)
    from chatids._jinja2_fallback import Jinja2Route

    assert isinstance(back._route, Jinja2Route)


# --- The mistral-common route (tokenizer files from the mistral-common package) --------------


def mistral_common_routes() -> dict[str, tuple[str, str, dict]]:
    from test_mistral_common import ROUTES

    return ROUTES


@pytest.mark.parametrize(
    "route",
    [
        "mistral-common-v1",
        "mistral-common-v2",
        "mistral-common-v3",
        "mistral-common-v7",
        "mistral-common-v3-tekken",
        "mistral-common-v7-tekken",
    ],
)
def test_round_trip_mistral_common(route: str, tmp_path: Path) -> None:
    mistral_common = pytest.importorskip("mistral_common")
    source, target, patch = mistral_common_routes()[route]
    data = Path(mistral_common.__file__).parent / "data" / source
    d = tmp_path / route
    d.mkdir()
    if patch:
        content = json.loads(data.read_text())
        content["config"].update(patch)
        (d / target).write_text(json.dumps(content))
    else:
        shutil.copy(data, d / target)
    enc = chatids.Encoder.from_pretrained(d)
    assert enc.format == route and enc.reference == "mistral-common"
    back = round_trip(enc, route, {"now": NOW}, d)
    assert str(d / target) in back.explain()


# --- GGUF files (written as test_gguf.py writes them) ------------------------------------------


def test_round_trip_tiny_gguf(tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    from test_gguf import _tiny

    path = _tiny(tmp_path / "tiny.gguf", template="{% for m in messages %}{{ m['content'] }}{% endfor %}")
    enc = chatids.Encoder.from_pretrained(path)
    back = round_trip(enc, "tiny.gguf", {}, path)
    assert back.encode([{"role": "user", "content": "a a"}]).tolist() == [261, 261]


def test_round_trip_gguf(tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    from test_gguf import CASES, write_case

    case = CASES["qwen3"]
    path = tmp_path / "qwen3.gguf"
    write_case(case, path)
    enc = chatids.Encoder.from_pretrained(path)
    assert enc.reference == "transformers"
    round_trip(enc, "qwen3.gguf", template_kwargs(enc, case.fmt), path)


# --- Bad states ----------------------------------------------------------------------------------


def test_bad_states_raise_a_clear_error() -> None:
    enc = chatids.Encoder.from_pretrained(support.require_model_path("qwen3-0.6b"))
    state = enc._core.to_bytes()
    assert state[:8] == b"chatids\x00"
    with pytest.raises(chatids.CheckpointError, match="not a chatids Encoder state"):
        _encoder_from_state(b"garbage")
    with pytest.raises(chatids.CheckpointError, match="not a chatids Encoder state"):
        _encoder_from_state(b"")
    # The state's own version byte is the newest this build reads.
    with pytest.raises(chatids.CheckpointError, match=f"format version 99.*reads versions 1 to {state[8]}"):
        _encoder_from_state(state[:8] + bytes([99]) + state[9:])
    assert state[8] == 3
    for cut in (9, 20, len(state) // 2, len(state) - 1):
        with pytest.raises(chatids.CheckpointError, match="invalid chatids Encoder state"):
            _encoder_from_state(state[:cut])
    flipped = bytearray(state)
    flipped[len(state) - 1000 : len(state) - 990] = b"\xff" * 10
    with pytest.raises(chatids.CheckpointError, match="invalid chatids Encoder state.*damaged"):
        _encoder_from_state(bytes(flipped))
    with pytest.raises(TypeError):
        _core.Encoder.from_bytes("a string")  # type: ignore[arg-type]
    # A good state still loads after the failures.
    assert _encoder_from_state(state).encode(FIXED[0]).tolist() == enc.encode(FIXED[0]).tolist()


# --- Processes ------------------------------------------------------------------------------------

POOL_MODEL = "llama-3.1-8b-instruct"


def _encode_in_worker(enc: chatids.Encoder, convs: list[list[dict]], kwargs: dict[str, Any]) -> tuple[int, list[list[int]]]:
    """Runs in a worker: `enc` arrived pickled."""
    batch = enc.encode_batch(convs, add_generation_prompt=True, **kwargs)
    single = [enc.encode(c, True, **kwargs).tolist() for c in convs]
    assert [row.tolist() for row in batch] == single
    return os.getpid(), single


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_multiprocessing_pool(method: str) -> None:
    enc = chatids.Encoder.from_pretrained(support.require_model_path(POOL_MODEL))
    kwargs = template_kwargs(enc, support.MODELS[POOL_MODEL][0])
    convs = [c for c in conversations() if not isinstance(outcome(lambda: enc.encode(c, True, **kwargs)), tuple)]
    expected = [enc.encode(c, True, **kwargs).tolist() for c in convs]
    enc.encode_batch(convs, **kwargs)  # the parent has used its pools before forking
    chunks = [convs[i::2] for i in range(2)]
    ctx = multiprocessing.get_context(method)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() of a multi-threaded process
        with ctx.Pool(2) as pool:
            results = pool.starmap_async(_encode_in_worker, [(enc, chunk, kwargs) for chunk in chunks]).get(timeout=300)
    assert all(pid != os.getpid() for pid, _ in results)
    for i, (_, ids) in enumerate(results):
        assert ids == expected[i::2]


def test_datasets_map_num_proc(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    from datasets.fingerprint import Hasher

    enc = chatids.Encoder.from_pretrained(support.require_model_path(POOL_MODEL))
    kwargs = template_kwargs(enc, support.MODELS[POOL_MODEL][0])
    kwargs.pop("now")
    convs = [[{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}] for i in range(8)]
    expected = [enc.encode(c, **kwargs).tolist() for c in convs]
    ds = datasets.Dataset.from_list([{"messages": c} for c in convs])

    def tokenize(row: dict) -> dict:
        return {"input_ids": enc.encode(row["messages"], **kwargs).tolist()}

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        out = ds.map(tokenize, num_proc=2, cache_file_name=str(tmp_path / "cache.arrow"))
    assert out["input_ids"] == expected
    # The fingerprint of the function does not depend on the encoder instance: the cache is reused.
    again = pickle.loads(pickle.dumps(enc))
    assert Hasher.hash(enc) == Hasher.hash(again)


# Ray (tasks and actors receiving the encoder by value): tests/test_ray.py.


def test_zz_sizes(capsys) -> None:
    """Print the pickled sizes (run with -s to see them)."""
    with capsys.disabled():
        for key, size in SIZES.items():
            print(f"\npickled {key}: {size / 1e6:.2f} MB", end="")
        print()
