"""The compiled encoder cache: ``Encoder.from_pretrained(path, cache_dir=...)``.

The first load writes the encoder's compiled state to the cache folder; the next loads read it.
An encoder read from the cache must be the encoder the checkpoint gives: the same ids, text,
stop ids, format, explanation and tokenizer on every shared checkpoint (``assert_same`` of the
pickle tests, on the fixed conversations and a sample of the corpus), the same decoding, and the
same pickled state. A changed tokenizer file, template or load option must give a new entry
(never the stale one); a damaged entry must be rebuilt and replaced, never trusted; a cache that
cannot be written must not fail the load.
"""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest

import support
from test_pickle import FIXED, assert_same, template_kwargs

import chatids


def entries(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.chatids"))


@pytest.mark.parametrize("name", support.MODEL_NAMES)
def test_an_encoder_read_from_the_cache_is_the_loaded_one(name: str, tmp_path: Path) -> None:
    path = support.require_model_path(name)
    cache = tmp_path / "cache"
    built = chatids.Encoder.from_pretrained(path, cache_dir=cache)
    assert built.cache_use is not None and built.cache_use.startswith("built, and written to")
    [entry] = entries(cache)
    assert str(entry) in built.cache_use
    read = chatids.Encoder.from_pretrained(path, cache_dir=cache)
    assert read.cache_use == f"read from {entry}"
    assert_same(built, read, template_kwargs(built, support.MODELS[name][0]))
    ids = built.encode(FIXED[2], add_generation_prompt=False, **template_kwargs(built, support.MODELS[name][0]))
    assert read.decode(ids.tolist()) == built.decode(ids.tolist())
    # Pickles of both carry the same state.
    assert pickle.dumps(read) == pickle.dumps(built)
    assert entries(cache) == [entry]


def small_copy(tmp_path: Path, name: str = "llama-2-7b-chat") -> Path:
    copy = tmp_path / name
    shutil.copytree(support.require_model_path(name), copy)
    return copy


CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def test_a_changed_file_or_option_is_never_served_a_stale_entry(tmp_path: Path) -> None:
    copy = small_copy(tmp_path)
    cache = tmp_path / "cache"
    first = chatids.Encoder.from_pretrained(copy, cache_dir=cache)
    assert chatids.Encoder.from_pretrained(copy, cache_dir=cache).cache_use.startswith("read from")
    config_path = copy / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = CHATML
    config_path.write_text(json.dumps(config))
    changed = chatids.Encoder.from_pretrained(copy, cache_dir=cache)
    assert changed.cache_use.startswith("built, and written to")
    assert changed.render([{"role": "user", "content": "hi"}]) == "<|im_start|>user\nhi<|im_end|>\n"
    assert first.render([{"role": "user", "content": "hi"}]) != changed.render([{"role": "user", "content": "hi"}])
    assert len(entries(cache)) == 2
    # A file the loader reads besides the tokenizer: generation_config.json.
    (copy / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 0]}))
    again = chatids.Encoder.from_pretrained(copy, cache_dir=cache)
    assert again.cache_use.startswith("built, and written to")
    assert again.stop_token_ids == chatids.Encoder.from_pretrained(copy).stop_token_ids
    assert len(entries(cache)) == 3
    # Load options are part of the key.
    jinja = chatids.Encoder.from_pretrained(copy, cache_dir=cache, format="jinja")
    assert jinja.cache_use.startswith("built, and written to") and jinja.format == "jinja"
    read = chatids.Encoder.from_pretrained(copy, cache_dir=cache, format="jinja")
    assert read.cache_use.startswith("read from") and read.format == "jinja"
    default = chatids.Encoder.from_pretrained(copy, cache_dir=cache)
    assert default.cache_use.startswith("read from") and default.explain() != read.explain()
    assert len(entries(cache)) == 4


@pytest.mark.parametrize("damage", ["flipped", "truncated", "garbage", "empty"])
def test_a_damaged_entry_is_rebuilt_and_replaced(damage: str, tmp_path: Path) -> None:
    path = support.require_model_path("qwen2.5-7b-instruct")
    cache = tmp_path / "cache"
    built = chatids.Encoder.from_pretrained(path, cache_dir=cache)
    [entry] = entries(cache)
    data = bytearray(entry.read_bytes())
    if damage == "flipped":
        data[len(data) // 2] ^= 0x01
    elif damage == "truncated":
        data = data[: len(data) - 100]
    elif damage == "garbage":
        data = bytearray(b"not a state at all")
    else:
        data = bytearray()
    entry.write_bytes(bytes(data))
    rebuilt = chatids.Encoder.from_pretrained(path, cache_dir=cache)
    assert rebuilt.cache_use.startswith(f"built again, and {entry} replaced"), rebuilt.cache_use
    assert "chatids Encoder state" in rebuilt.cache_use
    assert_same(built, rebuilt, {})
    read = chatids.Encoder.from_pretrained(path, cache_dir=cache)
    assert read.cache_use == f"read from {entry}"
    assert_same(built, read, {})


def test_a_cache_that_cannot_be_written_does_not_fail_the_load(tmp_path: Path) -> None:
    path = support.require_model_path("llama-2-7b-chat")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    enc = chatids.Encoder.from_pretrained(path, cache_dir=blocker / "cache")
    assert "could not be written" in enc.cache_use
    assert enc.encode(FIXED[0]).tolist() == chatids.Encoder.from_pretrained(path).encode(FIXED[0]).tolist()


def test_the_environment_names_the_folder_and_false_turns_it_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = support.require_model_path("llama-2-7b-chat")
    monkeypatch.setenv("CHATIDS_CACHE_DIR", str(tmp_path / "from-env"))
    assert chatids.Encoder.from_pretrained(path).cache_use.startswith("built, and written to")
    assert chatids.Encoder.from_pretrained(path).cache_use.startswith("read from")
    assert len(entries(tmp_path / "from-env")) == 1
    assert chatids.Encoder.from_pretrained(path, cache_dir=False).cache_use is None
    with pytest.raises(ValueError, match="cache_dir must be a folder"):
        chatids.Encoder.from_pretrained(path, cache_dir=True)
    monkeypatch.delenv("CHATIDS_CACHE_DIR")
    assert chatids.Encoder.from_pretrained(path).cache_use is None


def test_gguf_files_are_not_cached(tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    from test_gguf import _tiny

    gguf = _tiny(tmp_path / "tiny.gguf", template="{% for m in messages %}{{ m['content'] }}{% endfor %}")
    enc = chatids.Encoder.from_pretrained(gguf, cache_dir=tmp_path / "cache")
    assert enc.cache_use is not None and enc.cache_use.startswith("not cached")
    assert not (tmp_path / "cache").exists()


def test_text_the_native_core_hands_back_is_encoded_after_a_cache_read(tmp_path: Path) -> None:
    """Qwen2.5 normalizes with NFC: text that is not NFC goes to the tokenizers crate, which an
    encoder read from the cache builds on first use."""
    path = support.require_model_path("qwen2.5-7b-instruct")
    cache = tmp_path / "cache"
    loaded = chatids.Encoder.from_pretrained(path, cache_dir=cache)
    read = chatids.Encoder.from_pretrained(path, cache_dir=cache)
    assert read.cache_use.startswith("read from")
    decomposed = [{"role": "user", "content": "cafe\u0301 nai\u0308ve \u212b"}]
    assert read.encode(decomposed).tolist() == loaded.encode(decomposed).tolist()
    assert read._core.tokenizer_json() == loaded._core.tokenizer_json()


def test_loads_that_write_the_same_entry_at_once_leave_one_complete_entry(tmp_path: Path) -> None:
    """Threads (and processes) that build the same entry together each write a temporary file of
    their own and rename it into place: the entry is complete, and no temporary file is left."""
    from concurrent.futures import ThreadPoolExecutor

    path = support.require_model_path("llama-2-7b-chat")
    cache = tmp_path / "cache"
    with ThreadPoolExecutor(max_workers=4) as pool:
        loaded = list(pool.map(lambda _: chatids.Encoder.from_pretrained(path, cache_dir=cache), range(4)))
    assert all(e.cache_use is not None and not e.cache_use.startswith("built;") for e in loaded)
    assert [p.name for p in cache.iterdir()] == [entries(cache)[0].name]
    read = chatids.Encoder.from_pretrained(path, cache_dir=cache)
    assert read.cache_use.startswith("read from")
    assert_same(loaded[0], read, {})
