//! Training columns: which tokens a loss is computed on, and truncation to a length budget.
//!
//! The loss mask is derived from provenance, with no `{% generation %}` markup needed: every
//! format marks each message's *body* ([`crate::pieces::Piece::body`]): what follows its role
//! header, through the token that ends the turn (`<|eot_id|>`, `<|im_end|>`, `</s>`,
//! `<end_of_turn>`), without the separator the template writes after that token (ChatML's and
//! Gemma's `"\n"`: the model stops at the end-of-turn token and never generates it). For an
//! assistant message the body is exactly what the model must generate after the generation
//! prompt. A token that straddles a body boundary (BPE merged header and body text) counts,
//! as transformers counts any token that overlaps a `{% generation %}` span.
//!
//! What is trained is the [`TrainOn`] policy, overridden per message by its `train` key.

use crate::encoder::{EncodeOptions, Encoder};
use crate::error::{Error, Result, TemplateError};
use crate::message::Message;
use crate::piece_encoder::{EncodedChat, Tracking};

/// Which tokens the loss mask selects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TrainOn {
    /// The bodies of all assistant messages (the default).
    #[default]
    AllAssistant,
    /// The body of the last assistant message only.
    LastAssistant,
    /// Every token (template tokens, headers, every message), except the tokens of messages
    /// whose `train` key is false.
    All,
}

impl TrainOn {
    /// Parse the Python name (`"all_assistant"`, `"last_assistant"`, `"all"`).
    pub fn parse(name: &str) -> Result<Self, TemplateError> {
        match name {
            "all_assistant" => Ok(TrainOn::AllAssistant),
            "last_assistant" => Ok(TrainOn::LastAssistant),
            "all" => Ok(TrainOn::All),
            other => Err(TemplateError::whole(format!(
                "train_on must be \"all_assistant\", \"last_assistant\" or \"all\", not {other:?}"
            ))),
        }
    }

    /// The Python name.
    pub fn name(self) -> &'static str {
        match self {
            TrainOn::AllAssistant => "all_assistant",
            TrainOn::LastAssistant => "last_assistant",
            TrainOn::All => "all",
        }
    }
}

/// What to do with a conversation longer than `max_length`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TruncationPolicy {
    /// Raise (the default when `max_length` is set).
    #[default]
    Error,
    /// Keep a leading system message and the latest turns, cutting at the start of a user
    /// message (whole turns, like mistral-common's truncation); the conversation is re-encoded.
    DropOldestTurns,
    /// Cut tokens at the end.
    Right,
}

impl TruncationPolicy {
    /// Parse the Python name (`"error"`, `"drop_oldest_turns"`, `"right"`).
    pub fn parse(name: &str) -> Result<Self, TemplateError> {
        match name {
            "error" => Ok(TruncationPolicy::Error),
            "drop_oldest_turns" => Ok(TruncationPolicy::DropOldestTurns),
            "right" => Ok(TruncationPolicy::Right),
            other => Err(TemplateError::whole(format!(
                "truncation must be \"error\", \"drop_oldest_turns\" or \"right\", not {other:?}"
            ))),
        }
    }

    /// The Python name.
    pub fn name(self) -> &'static str {
        match self {
            TruncationPolicy::Error => "error",
            TruncationPolicy::DropOldestTurns => "drop_oldest_turns",
            TruncationPolicy::Right => "right",
        }
    }
}

/// The training columns asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrainingOptions {
    /// Compute the loss mask.
    pub mask: bool,
    /// Which tokens the mask selects.
    pub train_on: TrainOn,
    /// The length budget in tokens, if any.
    pub max_length: Option<usize>,
    /// What to do over budget.
    pub truncation: TruncationPolicy,
    /// Also return each token's message index and origin ([`TrainingChat::provenance`]).
    pub provenance: bool,
}

impl TrainingOptions {
    /// The options as callers spell them (`train_on="all_assistant"`, `truncation="right"`):
    /// no `truncation` means `"error"`, and a truncation policy needs `max_length`.
    pub fn parse(
        mask: bool,
        train_on: &str,
        max_length: Option<usize>,
        truncation: Option<&str>,
        provenance: bool,
    ) -> std::result::Result<Self, TemplateError> {
        let truncation = match truncation {
            None => TruncationPolicy::Error,
            Some(name) if max_length.is_none() => {
                return Err(TemplateError::whole(format!(
                    "truncation={name:?} needs max_length"
                )))
            }
            Some(name) => TruncationPolicy::parse(name)?,
        };
        Ok(TrainingOptions {
            mask,
            train_on: TrainOn::parse(train_on)?,
            max_length,
            truncation,
            provenance,
        })
    }
}

/// What a truncation policy cut from one conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncated {
    /// The policy that cut.
    pub policy: TruncationPolicy,
    /// Tokens before truncation.
    pub original_length: usize,
    /// Tokens removed.
    pub dropped_tokens: usize,
    /// Indices of the caller's messages removed (`DropOldestTurns`).
    pub dropped_messages: Vec<usize>,
}

/// One conversation encoded for training.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrainingChat {
    /// Token ids.
    pub ids: Vec<u32>,
    /// Per token, 1 where the loss is computed; empty unless the mask was asked for.
    pub mask: Vec<u8>,
    /// What truncation cut, if anything.
    pub truncation: Option<Truncated>,
    /// With [`TrainingOptions::provenance`], the ids with their message indices (into the
    /// caller's messages) and origins; `ids` then equals `provenance.ids`.
    pub provenance: Option<EncodedChat>,
}

/// Per message (of the caller's list), whether its body is trained under `train_on`, before
/// the `train` keys; the keys override it.
pub fn trained_messages(messages: &[Message], train_on: TrainOn) -> Vec<bool> {
    let last_assistant = messages.iter().rposition(|m| m.role == "assistant");
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            m.train.unwrap_or(match train_on {
                TrainOn::AllAssistant => m.role == "assistant",
                TrainOn::LastAssistant => Some(i) == last_assistant,
                TrainOn::All => true,
            })
        })
        .collect()
}

/// The loss mask of `chat` (encoded with message indices and bodies tracked). `trained` is
/// indexed like the messages `chat` refers to.
pub fn loss_mask(chat: &EncodedChat, trained: &[bool], train_on: TrainOn) -> Vec<u8> {
    let is_trained = |m: i32| m >= 0 && trained.get(m as usize).copied().unwrap_or(false);
    match train_on {
        TrainOn::All => chat
            .message_indices
            .iter()
            .map(|&m| u8::from(m < 0 || is_trained(m)))
            .collect(),
        _ => chat
            .body_messages
            .iter()
            .map(|&m| u8::from(is_trained(m)))
            .collect(),
    }
}

/// Refuse a mask that would silently leave out a message selected for training: every such
/// message still in `chat` must have body tokens. Native formats and the mistral-common route
/// mark every body; the Jinja path cannot locate an assistant turn whose content is empty, nor
/// a tool-call-only turn it cannot place unambiguously (`call_turns` in
/// `crate::render::jinja`), and then a mask would not train it.
fn check_bodies_located(
    chat: &EncodedChat,
    trained: &[bool],
    dropped: &[usize],
) -> Result<(), TemplateError> {
    let with_body: std::collections::BTreeSet<i32> = chat.body_messages.iter().copied().collect();
    for (i, &train) in trained.iter().enumerate() {
        if train && !dropped.contains(&i) && !with_body.contains(&(i as i32)) {
            return Err(TemplateError::at(
                i,
                "this message is selected for training, but its text cannot be located in the prompt the \
                 template renders (an assistant turn without content, e.g. tool calls only, on the Jinja \
                 path), so a loss mask would leave it out; set its 'train' to False, or use train_on=\"all\"",
            ));
        }
    }
    Ok(())
}

/// The error for a conversation with nothing to train on.
pub fn nothing_to_train(train_on: TrainOn, truncated: bool) -> TemplateError {
    let why = match train_on {
        TrainOn::All => "every message has train=False",
        _ => "it has no assistant message (or every one has train=False)",
    };
    TemplateError::whole(if truncated {
        format!("nothing to train on after truncation: the cut removed every trained token (train_on={:?})", train_on.name())
    } else {
        format!(
            "nothing to train on: {why} (train_on={:?}); a prompt-only conversation needs no mask",
            train_on.name()
        )
    })
}

/// The indices at which `drop_oldest_turns` may start the kept turns, fewest dropped first:
/// each user message after the leading system message (if any).
pub fn turn_starts(messages: &[Message]) -> (usize, Vec<usize>) {
    let keep = usize::from(messages.first().is_some_and(|m| m.role == "system"));
    let starts = (keep..messages.len())
        .filter(|&i| messages[i].role == "user")
        .collect();
    (keep, starts)
}

/// Encode `messages` for training: the ids, the loss mask when asked, and the truncation
/// policy applied when the conversation is longer than `training.max_length`.
pub fn encode_for_training(
    encoder: &Encoder,
    messages: &[Message],
    options: &EncodeOptions,
    training: &TrainingOptions,
) -> Result<TrainingChat> {
    let tracking = Tracking {
        message_indices: training.mask || training.provenance,
        from_content: training.provenance,
        body: training.mask,
    };
    let mut chat = encoder.encode_tracked(messages, options, tracking)?;
    let mut truncation = None;
    if let Some(max) = training.max_length.filter(|&max| chat.ids.len() > max) {
        let original_length = chat.ids.len();
        match training.truncation {
            TruncationPolicy::Error => {
                return Err(TemplateError::whole(format!(
                    "the conversation is {original_length} tokens, more than max_length={max} \
                     (truncation=\"error\"; \"drop_oldest_turns\" or \"right\" cut it)"
                ))
                .into())
            }
            TruncationPolicy::Right => {
                chat.ids.truncate(max);
                chat.message_indices.truncate(max);
                chat.from_content.truncate(max);
                chat.body_messages.truncate(max);
                truncation = Some(Truncated {
                    policy: TruncationPolicy::Right,
                    original_length,
                    dropped_tokens: original_length - max,
                    dropped_messages: Vec::new(),
                });
            }
            TruncationPolicy::DropOldestTurns => {
                let (shorter, indices) =
                    drop_oldest_turns(encoder, messages, options, tracking, &chat, max)?;
                let dropped: Vec<usize> = (0..messages.len())
                    .filter(|i| !indices.contains(i))
                    .collect();
                truncation = Some(Truncated {
                    policy: TruncationPolicy::DropOldestTurns,
                    original_length,
                    dropped_tokens: original_length - shorter.ids.len(),
                    dropped_messages: dropped,
                });
                chat = shorter;
            }
        }
    }
    let mask = if training.mask {
        // Message indices refer to `messages` even after turns were dropped.
        let trained = trained_messages(messages, training.train_on);
        let mask = loss_mask(&chat, &trained, training.train_on);
        if !mask.contains(&1) {
            return Err(nothing_to_train(training.train_on, truncation.is_some()).into());
        }
        // The template route's Jinja path may not locate a body; the mistral-common route
        // marks every message it encodes (v2 drops earlier tool calls, as mistral-common does).
        if encoder.route() == crate::encoder::Route::Transformers
            && training.train_on != TrainOn::All
            && !truncation
                .as_ref()
                .is_some_and(|t| t.policy == TruncationPolicy::Right)
        {
            let dropped = truncation
                .as_ref()
                .map_or(&[][..], |t| &t.dropped_messages[..]);
            check_bodies_located(&chat, &trained, dropped)?;
        }
        mask
    } else {
        Vec::new()
    };
    if training.provenance {
        chat.body_messages = Vec::new();
        return Ok(TrainingChat {
            ids: chat.ids.clone(),
            mask,
            truncation,
            provenance: Some(chat),
        });
    }
    Ok(TrainingChat {
        ids: chat.ids,
        mask,
        truncation,
        provenance: None,
    })
}

/// Re-encode without the oldest turns until the conversation fits in `max` tokens: the
/// fewest turns dropped that fit. Returns the encoding (message indices mapped back to
/// `messages`) and the indices of the messages kept.
///
/// The per-message token counts of the full encoding give the first candidate; the search
/// then re-encodes (the template may write a turn differently once earlier ones are gone),
/// stepping back while dropping one turn less still fits, forward while it does not.
fn drop_oldest_turns(
    encoder: &Encoder,
    messages: &[Message],
    options: &EncodeOptions,
    tracking: Tracking,
    full: &EncodedChat,
    max: usize,
) -> Result<(EncodedChat, Vec<usize>)> {
    let (keep, starts) = turn_starts(messages);
    let starts: Vec<usize> = starts.into_iter().filter(|&s| s > keep).collect();
    let counted;
    let full = if full.message_indices.is_empty() {
        let with_indices = Tracking {
            message_indices: true,
            ..tracking
        };
        counted = encoder.encode_tracked(messages, options, with_indices)?;
        &counted
    } else {
        full
    };
    let mut per_message = vec![0usize; messages.len()];
    for &m in &full.message_indices {
        if m >= 0 {
            per_message[m as usize] += 1;
        }
    }
    let estimate = |k: usize| full.ids.len() - per_message[keep..starts[k]].iter().sum::<usize>();
    let attempt = |k: usize| -> Result<(EncodedChat, Vec<usize>)> {
        let indices: Vec<usize> = (0..keep).chain(starts[k]..messages.len()).collect();
        let shorter: Vec<Message> = indices.iter().map(|&i| messages[i].clone()).collect();
        let mut chat = encoder
            .encode_tracked(&shorter, options, tracking)
            .map_err(|e| match e {
                Error::Template(t) => Error::Template(TemplateError {
                    message: t.message.map(|m| indices[m]),
                    ..t
                }),
                other => other,
            })?;
        for m in chat
            .message_indices
            .iter_mut()
            .chain(chat.body_messages.iter_mut())
        {
            if *m >= 0 {
                *m = indices[*m as usize] as i32;
            }
        }
        Ok((chat, indices))
    };
    let too_long = |shortest: usize| -> Error {
        TemplateError::whole(format!(
            "the conversation is {} tokens, more than max_length={max}, and dropping its oldest turns does not make it fit \
             (the system message and the last turn alone are {shortest} tokens); use truncation=\"right\" or a larger max_length",
            full.ids.len()
        ))
        .into()
    };
    if starts.is_empty() {
        return Err(too_long(full.ids.len()));
    }
    let mut k = (0..starts.len())
        .find(|&k| estimate(k) <= max)
        .unwrap_or(starts.len() - 1);
    let mut found = attempt(k)?;
    if found.0.ids.len() <= max {
        while k > 0 {
            let fewer = attempt(k - 1)?;
            if fewer.0.ids.len() > max {
                break;
            }
            found = fewer;
            k -= 1;
        }
        return Ok(found);
    }
    while k + 1 < starts.len() {
        k += 1;
        found = attempt(k)?;
        if found.0.ids.len() <= max {
            return Ok(found);
        }
    }
    Err(too_long(found.0.ids.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(role: &str, train: Option<bool>) -> Message {
        Message {
            train,
            ..Message::new(role, "x")
        }
    }

    #[test]
    fn policies_pick_messages_and_train_keys_override() {
        let m = vec![
            msg("system", None),
            msg("user", None),
            msg("assistant", None),
            msg("user", Some(true)),
            msg("assistant", Some(false)),
            msg("assistant", None),
        ];
        assert_eq!(
            trained_messages(&m, TrainOn::AllAssistant),
            vec![false, false, true, true, false, true]
        );
        assert_eq!(
            trained_messages(&m, TrainOn::LastAssistant),
            vec![false, false, false, true, false, true]
        );
        assert_eq!(
            trained_messages(&m, TrainOn::All),
            vec![true, true, true, true, false, true]
        );
    }

    #[test]
    fn mask_follows_bodies_or_message_indices() {
        let chat = EncodedChat {
            ids: vec![1, 2, 3, 4, 5, 6],
            message_indices: vec![-1, 0, 0, 1, 1, 1],
            from_content: vec![],
            body_messages: vec![-1, -1, 0, -1, 1, 1],
        };
        assert_eq!(
            loss_mask(&chat, &[false, true], TrainOn::AllAssistant),
            vec![0, 0, 0, 0, 1, 1]
        );
        assert_eq!(
            loss_mask(&chat, &[false, true], TrainOn::All),
            vec![1, 0, 0, 1, 1, 1]
        );
    }

    #[test]
    fn turns_start_at_user_messages_after_the_system_message() {
        let m = vec![
            msg("system", None),
            msg("user", None),
            msg("assistant", None),
            msg("user", None),
            msg("assistant", None),
        ];
        assert_eq!(turn_starts(&m), (1, vec![1, 3]));
        assert_eq!(turn_starts(&m[1..]), (0, vec![0, 2]));
    }

    #[test]
    fn names_round_trip_and_bad_names_are_refused() {
        for t in [TrainOn::AllAssistant, TrainOn::LastAssistant, TrainOn::All] {
            assert_eq!(TrainOn::parse(t.name()).unwrap(), t);
        }
        for t in [
            TruncationPolicy::Error,
            TruncationPolicy::DropOldestTurns,
            TruncationPolicy::Right,
        ] {
            assert_eq!(TruncationPolicy::parse(t.name()).unwrap(), t);
        }
        assert!(TrainOn::parse("assistant").is_err());
        assert!(TruncationPolicy::parse("left").is_err());
    }
}
