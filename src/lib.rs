//! # chatids
//!
//! Chat conversations straight to token ids for open-weight LLMs, token-for-token identical
//! to transformers' `apply_chat_template` with the checkpoint's own template, and safe against
//! special-token injection by default.
//!
//! The pipeline, one module per step:
//!
//! 1. [`checkpoint`] loads a checkpoint directory (tokenizer, special tokens, chat template),
//!    adjusting the tokenizer to encode as transformers loads it.
//! 2. [`input`] prepares the conversation in one step (tool checks, prefill, policies), and
//!    [`render`] holds the renderers: the native formats, the Jinja path, the probes that
//!    prove a native format matches the checkpoint's template, and the format choice. Each
//!    turns [`message::Message`]s into a [`pieces::Pieces`] stream of template tokens,
//!    template text and content, every piece tagged with its message.
//! 3. [`piece_encoder`] turns the piece stream into ids: tokens as ids, each run of text through
//!    the [`text::TextEncoder`], control tokens in content neutralised
//!    ([`control_tokens`]).
//! 4. [`completion`] reads the way back: a completion's ids to the assistant message, by the
//!    format's [`completion::Grammar`], one id at a time.
//! 5. [`encoder::Encoder`] ties them together; [`batch`] encodes many conversations in
//!    parallel (on chatids' own thread pools, safe after `fork()`); [`training`] and
//!    [`pairs`] build loss masks, prompt–completion pairs and preference triples; [`persist`]
//!    turns an encoder into bytes and back (Python pickles encoders by value with it), and
//!    [`compiled`] keeps those bytes in a cache folder so that the next load reads them.
//!
//! The Python bindings (`chatids._core`, feature `python`) only convert types.
//!
//! ```no_run
//! use chatids::{EncodeOptions, Encoder, Message};
//!
//! let enc = Encoder::from_dir("models/llama-3.1-8b-instruct", None)?;
//! let messages = vec![Message::new("system", "You are terse."), Message::new("user", "Name a prime.")];
//! let options = EncodeOptions { add_generation_prompt: true, ..Default::default() };
//! let ids: Vec<u32> = enc.encode(&messages, &options)?;
//! let text: String = enc.render(&messages, &options)?;
//! # Ok::<(), chatids::Error>(())
//! ```

pub mod batch;
pub mod checkpoint;
pub mod compiled;
pub mod completion;
pub mod control_tokens;
pub mod encoder;
pub mod error;
pub mod input;
pub mod lint;
pub mod message;
pub mod mistral_common;
mod origin;
pub mod packing;
pub mod pairs;
pub mod persist;
pub mod piece_encoder;
pub mod pieces;
pub mod pystr;
pub mod render;
pub mod session;
pub mod template;
pub mod text;
pub mod training;

#[cfg(feature = "python")]
mod python;

pub use batch::Batch;
pub use encoder::{EncodeOptions, Encoder, FormatChoice, LoadOptions};
pub use error::{Error, Result, TemplateError};
pub use message::{Content, ContentPart, Message, TemplateValue};
pub use piece_encoder::{EncodedChat, Tracking};
