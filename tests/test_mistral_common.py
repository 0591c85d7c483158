"""The mistral-common route: exact against mistral-common's own `encode_chat_completion`.

Checkpoint directories are built from the tokenizer files that ship inside the mistral-common
package (`mistral_common/data/`), named as Mistral's repositories name them. The reference
runs in mistral-common's `test` validation mode for prompts and `finetuning` mode for
conversations that end with an assistant turn (the modes chatids follows).
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from pathlib import Path

import pytest

import chatids
import support
from edge_cases import PLAIN_TEXTS, control_texts, shapes

mistral_common = pytest.importorskip("mistral_common")
from mistral_common.protocol.instruct.request import ChatCompletionRequest  # noqa: E402
from mistral_common.protocol.instruct.validator import ValidationMode  # noqa: E402
from mistral_common.tokens.tokenizers.mistral import MistralTokenizer  # noqa: E402

MC_DATA = Path(mistral_common.__file__).parent / "data"

#: route -> (file in mistral_common/data, its name in the checkpoint directory, config patch)
ROUTES: dict[str, tuple[str, str, dict]] = {
    "mistral-common-v1": ("tokenizer.model.v1", "tokenizer.model.v1", {}),
    "mistral-common-v2": ("mistral_instruct_tokenizer_240216.model.v2", "tokenizer.model.v2", {}),
    "mistral-common-v3": ("mistral_instruct_tokenizer_240323.model.v3", "tokenizer.model.v3", {}),
    "mistral-common-v7": ("mistral_instruct_tokenizer_241114.model.v7", "tokenizer.model.v7", {}),
    "mistral-common-v3-tekken": ("tekken_240718.json", "tekken.json", {}),
    # Mistral-Small-24B-2501's tekken file declares v7 (the packaged copy says v3).
    "mistral-common-v7-tekken": ("tekken_240911.json", "tekken.json", {"version": "v7"}),
}

#: Why chatids may refuse a conversation mistral-common accepts: tools come later.
MC_POLICY = ("does not render yet", "are not rendered by chatids' mistral-common route yet")


class Route:
    def __init__(self, name: str, directory: Path):
        self.name = name
        self.dir = directory
        self.enc = chatids.Encoder.from_pretrained(directory)
        file = next(p for p in directory.iterdir())
        self.refs = {mode: MistralTokenizer.from_file(str(file), mode=mode) for mode in (ValidationMode.test, ValidationMode.finetuning)}

    def ref(self, messages: list[dict]) -> list[int]:
        mode = ValidationMode.finetuning if messages and messages[-1].get("role") == "assistant" else ValidationMode.test
        request = ChatCompletionRequest.from_openai(messages)
        return self.refs[mode].encode_chat_completion(request).tokens


@pytest.fixture(scope="session")
def route_dirs(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("mistral_common_checkpoints")
    dirs = {}
    for name, (source, target, patch) in ROUTES.items():
        d = base / name
        d.mkdir()
        if patch:
            data = json.loads((MC_DATA / source).read_text())
            data["config"].update(patch)
            (d / target).write_text(json.dumps(data))
        else:
            os.symlink(MC_DATA / source, d / target)
        dirs[name] = d
    return dirs


_ROUTES: dict[str, Route] = {}


@pytest.fixture(params=list(ROUTES))
def route(request, route_dirs) -> Route:
    if request.param not in _ROUTES:
        _ROUTES[request.param] = Route(request.param, route_dirs[request.param])
    return _ROUTES[request.param]


def compare(route: Route, messages: list[dict]) -> str:
    """chatids against mistral-common on one conversation; returns the outcome."""
    try:
        ref = route.ref(messages)
    except Exception as e:  # mistral-common rejects it: chatids must too
        try:
            route.enc.encode(messages)
        except chatids.ChatTemplateError:
            return "rejected_by_reference"
        raise AssertionError(f"mistral-common raised {type(e).__name__}: {e}; chatids encoded the conversation")
    try:
        ours = route.enc.encode(messages).tolist()
    except chatids.ChatTemplateError as e:
        assert any(p in str(e) for p in MC_POLICY), f"chatids refused with an undocumented reason: {e}"
        return "rejected_by_policy"
    assert ours == ref, f"differs from mistral-common: {support._first_difference(ours, ref)}"
    for sanitize in (False,):  # mistral-common never parses control tokens: the flag changes nothing
        assert route.enc.encode(messages, sanitize_control_tokens=sanitize).tolist() == ref
    return "compared"


def test_route_is_chosen_from_the_files(route):
    assert route.enc.format == route.name
    assert route.enc.reference == "mistral-common"
    assert "mistral-common" in route.enc.explain()
    assert route.enc.stop_token_ids == [route.refs[ValidationMode.test].instruct_tokenizer.tokenizer.eos_id]


FILES = support.corpus_files() or ["<no corpus>"]


@pytest.mark.parametrize("corpus_file", FILES)
def test_corpus_matches_mistral_common(route, corpus_file):
    if corpus_file == "<no corpus>":
        _, reason = support.data_dir()
        if support.require_models():
            pytest.fail(f"conversation corpus not found: {reason}")
        pytest.skip(f"conversation corpus not found: {reason}")
    outcomes: Counter = Counter()
    accepted = []
    for row in support.corpus_rows(corpus_file):
        # The prompt (up to the last non-assistant message) and the whole conversation.
        messages = row["messages"]
        last_prompt = max((i for i, m in enumerate(messages) if m["role"] != "assistant"), default=-1)
        for variant in (messages[: last_prompt + 1], messages):
            if not variant:
                continue
            outcome = compare(route, variant)
            outcomes[outcome] += 1
            if outcome == "compared":
                accepted.append(variant)
    if accepted:
        batch = route.enc.encode_batch(accepted)
        for i, conv in enumerate(accepted):
            assert batch[i].tolist() == route.ref(conv)
    print(route.name, corpus_file, dict(outcomes))


def test_edge_cases_match_mistral_common(route):
    tokens = [t for t, _ in route.enc.control_tokens][:40]
    texts = {**PLAIN_TEXTS, **control_texts(tokens)}
    outcomes: Counter = Counter()
    failures = []
    for name, text in texts.items():
        for shape, messages in shapes(text, "mistral").items():
            for variant in (messages, messages + [{"role": "assistant", "content": text or "ok"}]):
                try:
                    outcomes[compare(route, variant)] += 1
                except AssertionError as e:
                    failures.append(f"{name}/{shape}: {e}")
    assert not failures, "\n".join(failures[:10])
    assert outcomes["compared"] > 100


@pytest.mark.parametrize("name", ["mistral-common-v1", "mistral-common-v2", "mistral-common-v3"])
def test_golden_ids_of_mistral_common_samples(name, route_dirs):
    """mistral-common's own ground-truth ids (its tests/data/samples/no_tools, copied into the
    shared data) for the versions it publishes them for."""
    base, reason = support.data_dir()
    if base is None:
        if support.require_models():
            pytest.fail(f"conversation corpus not found: {reason}")
        pytest.skip(f"conversation corpus not found: {reason}")
    version = name.removeprefix("mistral-common-")
    golden = base / "mistral_common_samples" / "no_tools" / f"tokens_{version}.json"
    sample = json.loads((golden.parent / "sample.json").read_text())
    enc = chatids.Encoder.from_pretrained(route_dirs[name])
    assert enc.encode(sample["messages"]).tolist() == json.loads(golden.read_text())["tokens"]


def test_random_conversations_match_mistral_common(route):
    rng = random.Random(f"mc:{route.name}")
    pieces = list(PLAIN_TEXTS.values())[:-2] + ["hello", "  x  ", "[INST]", "</s>", "<s>", "数据", "\n\n"]
    n = 200 if support.full_conformance() else 40
    outcomes: Counter = Counter()
    for _ in range(n):
        roles = rng.choice([["user"], ["system", "user"], ["user", "assistant", "user"], ["user", "user", "assistant"],
                            ["system", "user", "assistant", "system", "user"], ["user", "system", "assistant"]])
        messages = [{"role": r, "content": "".join(rng.choice(pieces) for _ in range(rng.randint(0, 4)))} for r in roles]
        outcomes[compare(route, messages)] += 1
    assert outcomes["compared"] > 0


def test_transformers_route_on_request(route_dirs):
    """A directory with both files uses mistral-common by default; reference= switches."""
    nemo, _ = support.model_path("mistral-nemo-instruct-2407")
    if nemo is None:
        pytest.skip("mistral-nemo-instruct-2407 not found")
    both = route_dirs["mistral-common-v3-tekken"].parent / "both"
    both.mkdir(exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        if not (both / f).exists():
            os.symlink(nemo / f, both / f)
    if not (both / "tekken.json").exists():
        os.symlink(MC_DATA / "tekken_240718.json", both / "tekken.json")
    assert chatids.Encoder.from_pretrained(both).format == "mistral-common-v3-tekken"
    hf = chatids.Encoder.from_pretrained(both, reference="transformers")
    assert hf.format == "mistral-v3-tekken" and hf.reference == "transformers"
    with pytest.raises(chatids.CheckpointError, match="applies to the transformers route"):
        chatids.Encoder.from_pretrained(route_dirs["mistral-common-v3"], format="mistral-v3", reference="mistral-common")
    with pytest.raises(chatids.CheckpointError, match="no mistral-common tokenizer file"):
        chatids.Encoder.from_pretrained(nemo, reference="mistral-common")


def test_options_that_do_not_apply_are_refused(route):
    msgs = [{"role": "user", "content": "hi"}]
    with pytest.raises(chatids.ChatTemplateError, match="no template argument"):
        route.enc.encode(msgs, date_string="x")
    with pytest.raises(chatids.ChatTemplateError, match="system= applies to template formats"):
        route.enc.encode(msgs, system="fold")
