//! Prompt–completion pairs and preference triples for training (DPO, KTO, ORPO, reward models):
//! the prompt's ids shared, each completion's ids exactly what `encode(prompt + completion)`
//! adds after them.
//!
//! The split is TRL's (`DPOTrainer` and `KTOTrainer` since 0.29): the prompt is encoded with the
//! generation prompt; each joined conversation `prompt + completion` is encoded whole, with
//! none; the shared prompt is the longest prefix of the prompt's ids that every joined
//! conversation starts with, and each completion is the rest of its joined ids. So
//! `prompt_ids + completion_ids == encode(prompt + completion)` holds by construction, with no
//! text seam in between: rendering prompt and completion as two strings and tokenizing them
//! apart (the older recipe) merges or splits tokens across the seam.
//!
//! When the template renders the prompt alone differently from the prompt followed by a reply
//! (a generation prompt the reply's turn does not repeat), or tokens merge across the seam, the
//! shared prompt is shorter than the prompt's own ids: [`Pairs::prompt_cut`] says by how many
//! tokens, for the caller to see rather than to find out from a worse model.
//!
//! A completion is one message or several (an assistant turn calling a tool, the tool's result,
//! the assistant's answer). Its loss mask is the body (see [`crate::training`]) of each of its
//! assistant messages: what the model generates after the generation prompt, through the
//! end-of-turn token.

use rayon::prelude::*;

use crate::batch::{install, OnError, CHUNK};
use crate::encoder::{EncodeOptions, Encoder};
use crate::error::{Error, Result, TemplateError};
use crate::message::Message;
use crate::piece_encoder::Tracking;

/// One prompt with its completions, encoded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pairs {
    /// The shared prompt ids.
    pub prompt: Vec<u32>,
    /// Per completion: the ids after the shared prompt, and per id 1 where the loss is computed.
    pub completions: Vec<(Vec<u32>, Vec<u8>)>,
    /// How many trailing ids of the prompt's own encoding (with the generation prompt) are not
    /// in the shared prompt: 0 unless the template or a merge across the seam moves the split.
    pub prompt_cut: usize,
}

/// The number of leading ids `a` and `b` have in common.
fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Name which completion an error is about (`"chosen"`, `"rejected"`; empty: the only one),
/// keeping its indices.
fn about(mut e: Error, name: &str) -> Error {
    if let (Error::Template(t), false) = (&mut e, name.is_empty()) {
        t.rule = format!("({name}) {}", t.rule);
    }
    e
}

/// Encode `prompt` once with the generation prompt and `prompt + completions[k]` for each `k`,
/// and split them as the module documentation says. `names[k]` prefixes the errors about
/// completion `k` (empty: none). `options`' generation prompt and continuation are ignored: the
/// prompt takes the one, a completion is whole.
pub fn encode_completions(
    encoder: &Encoder,
    prompt: &[Message],
    completions: &[&[Message]],
    names: &[&str],
    options: &EncodeOptions,
) -> Result<Pairs> {
    let n = prompt.len();
    let prompt_options = EncodeOptions {
        add_generation_prompt: true,
        continue_final_message: false,
        ..options.clone()
    };
    let joined_options = EncodeOptions {
        add_generation_prompt: false,
        continue_final_message: false,
        ..options.clone()
    };
    let prompt_ids = encoder.encode(prompt, &prompt_options)?;
    let tracking = Tracking {
        body: true,
        ..Tracking::default()
    };
    let mut joined = Vec::with_capacity(completions.len());
    for (k, completion) in completions.iter().enumerate() {
        let name = names.get(k).copied().unwrap_or("");
        if completion.is_empty() {
            return Err(about(
                TemplateError::at(n, "the completion has no message").into(),
                name,
            ));
        }
        let trained: Vec<bool> = completion.iter().map(|m| m.role == "assistant").collect();
        if !trained.contains(&true) {
            return Err(about(
                TemplateError::at(
                    n,
                    "the completion has no assistant message: a completion is what the model \
                     generates after the prompt",
                )
                .into(),
                name,
            ));
        }
        let mut messages = Vec::with_capacity(n + completion.len());
        messages.extend_from_slice(prompt);
        messages.extend_from_slice(completion);
        let chat = encoder
            .encode_tracked(&messages, &joined_options, tracking)
            .map_err(|e| about(e, name))?;
        let is_trained = |m: i32| m >= n as i32 && trained[m as usize - n];
        let mask: Vec<u8> = chat
            .body_messages
            .iter()
            .map(|&m| u8::from(is_trained(m)))
            .collect();
        for (j, &train) in trained.iter().enumerate() {
            if train && !chat.body_messages.contains(&((n + j) as i32)) {
                return Err(about(
                    TemplateError::at(
                        n + j,
                        "this completion message's text cannot be located in the prompt the template \
                         renders (an assistant turn without content, e.g. tool calls only, on the \
                         Jinja path), so its loss mask would leave it out",
                    )
                    .into(),
                    name,
                ));
            }
        }
        joined.push((chat.ids, mask));
    }
    let shared = joined
        .iter()
        .map(|(ids, _)| common_prefix(&prompt_ids, ids))
        .min()
        .unwrap_or(prompt_ids.len());
    let completions = joined
        .into_iter()
        .map(|(mut ids, mut mask)| (ids.split_off(shared), mask.split_off(shared)))
        .collect();
    let prompt_cut = prompt_ids.len() - shared;
    let mut prompt = prompt_ids;
    prompt.truncate(shared);
    Ok(Pairs {
        prompt,
        completions,
        prompt_cut,
    })
}

/// One row of a batch of pairs: the prompt and its completions (the same number in every row),
/// or the error the caller met converting it.
pub type PairRow = std::result::Result<(Vec<Message>, Vec<Vec<Message>>), TemplateError>;

/// Ragged ids: row `i` is `ids[offsets[i]..offsets[i + 1]]`, with a mask aligned with `ids`
/// (empty for prompts).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ragged {
    /// All ids, row after row.
    pub ids: Vec<u32>,
    /// `rows + 1` offsets into `ids`.
    pub offsets: Vec<i64>,
    /// 1 where the loss is computed; empty for prompts.
    pub mask: Vec<u8>,
}

impl Ragged {
    fn new(capacity: usize) -> Self {
        let mut offsets = Vec::with_capacity(capacity + 1);
        offsets.push(0);
        Ragged {
            offsets,
            ..Default::default()
        }
    }

    fn push(&mut self, ids: &[u32], mask: &[u8]) {
        self.ids.extend_from_slice(ids);
        self.mask.extend_from_slice(mask);
        self.offsets.push(self.ids.len() as i64);
    }
}

/// Many rows of pairs, columnar: the prompts, one [`Ragged`] per completion slot, the
/// per-row `prompt_cut`, and the rows rejected with [`OnError::Collect`] (they have no ids).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PairBatch {
    /// The shared prompts.
    pub prompts: Ragged,
    /// Completion slot `k` of every row (`chosen`, `rejected`; or the one completion).
    pub completions: Vec<Ragged>,
    /// Per row, [`Pairs::prompt_cut`].
    pub prompt_cut: Vec<u32>,
    /// Rejected rows and why.
    pub errors: Vec<(usize, TemplateError)>,
}

/// How [`encode_pair_batch`] runs: errors raised or collected, the threads, and whether a
/// raised error names its row (not for a single pair).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PairBatchOptions {
    /// Raise the first failing row (by index) or collect every failure.
    pub on_error: OnError,
    /// Worker threads, as [`crate::batch::BatchOptions::num_threads`].
    pub num_threads: Option<usize>,
    /// Leave the row index out of a raised error (the caller passed one row, not a batch).
    pub single: bool,
}

/// Encode `rows` in parallel, each with `slots` completions named by `names` (for errors;
/// `""` for the only completion of a pair).
pub fn encode_pair_batch(
    encoder: &Encoder,
    rows: &[PairRow],
    slots: usize,
    names: &[&str],
    options: &EncodeOptions,
    batch_options: PairBatchOptions,
) -> Result<PairBatch> {
    let PairBatchOptions {
        on_error,
        num_threads,
        single,
    } = batch_options;
    let encode_row = |row: &PairRow| -> std::result::Result<Pairs, Error> {
        let (prompt, completions) = row.as_ref().map_err(|e| Error::Template(e.clone()))?;
        if completions.len() != slots {
            return Err(TemplateError::whole(format!(
                "expected {slots} completion(s), got {}",
                completions.len()
            ))
            .into());
        }
        let refs: Vec<&[Message]> = completions.iter().map(Vec::as_slice).collect();
        encode_completions(encoder, prompt, &refs, names, options)
    };
    // A chunk stops at its first failure when failures are raised: the rows after it are not
    // read (the first failure in row order is raised; the chunks before it have none).
    let work = || -> Vec<Vec<std::result::Result<Pairs, Error>>> {
        rows.par_chunks(CHUNK)
            .map(|chunk| {
                let mut out = Vec::with_capacity(chunk.len());
                for row in chunk {
                    let result = encode_row(row);
                    let failed = result.is_err();
                    out.push(result);
                    if failed && on_error == OnError::Raise {
                        break;
                    }
                }
                out
            })
            .collect()
    };
    let chunks = install(num_threads, work)?;
    let mut batch = PairBatch {
        prompts: Ragged::new(rows.len()),
        completions: (0..slots).map(|_| Ragged::new(rows.len())).collect(),
        prompt_cut: Vec::with_capacity(rows.len()),
        errors: Vec::new(),
    };
    for (index, result) in chunks.into_iter().flatten().enumerate() {
        match result {
            Ok(pairs) => {
                batch.prompts.push(&pairs.prompt, &[]);
                for (slot, (ids, mask)) in batch.completions.iter_mut().zip(&pairs.completions) {
                    slot.push(ids, mask);
                }
                batch.prompt_cut.push(pairs.prompt_cut as u32);
            }
            Err(Error::Template(t)) if on_error == OnError::Collect => {
                batch.errors.push((index, t));
                batch.prompts.push(&[], &[]);
                for slot in &mut batch.completions {
                    slot.push(&[], &[]);
                }
                batch.prompt_cut.push(0);
            }
            Err(Error::Template(t)) if single => return Err(Error::Template(t)),
            Err(Error::Template(t)) => return Err(Error::Template(t.in_conversation(index))),
            Err(other) => return Err(other),
        }
    }
    Ok(batch)
}

#[cfg(test)]
mod tests {
    use super::common_prefix;

    #[test]
    fn common_prefix_counts_leading_equal_ids() {
        assert_eq!(common_prefix(&[1, 2, 3], &[1, 2, 4, 5]), 2);
        assert_eq!(common_prefix(&[1, 2], &[1, 2, 3]), 2);
        assert_eq!(common_prefix(&[], &[1]), 0);
        assert_eq!(common_prefix(&[7], &[8]), 0);
    }
}
