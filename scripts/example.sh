#!/usr/bin/env bash
# Quick start 1 (`make example`): encode examples/conversations.jsonl and show two prompts.
# With the shared models ($CHATIDS_MODELS_DIR/llama-3.1-8b-instruct) it uses Llama 3.1's tokenizer;
# without them, the Mistral 7B v0.3 tokenizer bundled in examples/mistral-7b-v0.3 (Apache-2.0), so it
# runs with nothing beside the repository: no model folder, no Hugging Face cache, no network.
# Usage: scripts/example.sh PYTHON
set -euo pipefail
py="${1:-python3}"
llama="${CHATIDS_MODELS_DIR:-../shared/models}/llama-3.1-8b-instruct"
if [ -d "$llama" ]; then
  model="$llama"
else
  model="examples/mistral-7b-v0.3"
  echo "($llama not found: using the bundled Mistral 7B v0.3 tokenizer, $model)"
fi
exec "$py" -m chatids encode examples/conversations.jsonl --model "$model" --show 0,6
