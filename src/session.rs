//! Append-only encoding: a conversation that grows turn by turn (an agent loop, a chat server)
//! without re-encoding what it already holds.
//!
//! A [`Session`] keeps the ids of its messages and the rendered prompt they encode. Appending
//! renders the longer conversation (cheap: pieces, no BPE), finds how much of the previous
//! render it keeps unchanged, and encodes only the rest, starting at the last template token
//! inside the unchanged part: a special token is a hard BPE boundary, so everything before it
//! encodes exactly as a full encode would. The result always equals
//! [`Encoder::encode`] of all the messages, except where the caller appended the model's own
//! completion ids ([`Session::append_completion`]), which are kept as sampled.
//!
//! An append also plans the generation prompt from the same render where the template's two
//! outputs split at its generation-prompt block
//! ([`crate::template::ChatTemplate::render_data_split`]), so an agent step (append, then
//! [`Session::generation_prompt`]) renders the conversation once, not twice.
//!
//! Where a template is not *prefix-preserving* (its output for N messages is not a prefix of
//! its output for N+1, see [`append_rewrites`]), an append changes ids the session already
//! holds. [`OnRewrite`] decides: raise (the default: a serving stack's KV cache holds those
//! ids), or re-encode and report where the ids start to differ ([`Appended::start`]).
//!
//! The mistral-common route has no piece stream: its sessions re-encode the whole
//! conversation on each append (same results and checks, no speed-up), and take completion
//! ids that are exactly mistral-common's encoding of the parsed message.

use crate::control_tokens::TokenSplitter;
use crate::encoder::{EncodeOptions, Encoder};
use crate::error::{Result, TemplateError};
use crate::message::Message;
use crate::piece_encoder::{EncodedChat, PieceEncoder, Tracking};
use crate::pieces::{Piece, PieceKind, Pieces};
use crate::render::jinja::{one_piece, RenderId, RenderMemo, SplitText};
use std::sync::Arc;

/// What an append does when the template changes ids the session already holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnRewrite {
    /// Raise [`TemplateError`]; the session is unchanged.
    #[default]
    Error,
    /// Re-encode: the ids become those of a full encode, and [`Appended::start`] says where
    /// they first differ from the previous ones (the model's completion ids before that point
    /// are replaced by the encoding of the parsed message).
    Reencode,
}

impl OnRewrite {
    /// Parse `"error"` / `"reencode"`.
    pub fn parse(value: &str) -> Result<Self, TemplateError> {
        match value {
            "error" => Ok(OnRewrite::Error),
            "reencode" => Ok(OnRewrite::Reencode),
            other => Err(TemplateError::whole(format!(
                "on_rewrite must be \"error\" or \"reencode\", not {other:?}"
            ))),
        }
    }
}

/// What an append changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    /// Index of the first id that is new or changed: the previous length for a pure append,
    /// less after a re-encode ([`OnRewrite::Reencode`]).
    pub start: usize,
}

/// A layout's text: the first `len` bytes of a buffer, which a render without the generation
/// prompt can share with the same render with it ([`SplitText::Whole`]: one text, not a copy
/// for each).
#[derive(Debug, Clone, Default)]
struct SharedText {
    buf: Arc<String>,
    len: usize,
}

impl SharedText {
    fn new(buf: Arc<String>, len: usize) -> Self {
        assert!(
            buf.is_char_boundary(len),
            "a shared text ends inside a character"
        );
        SharedText { buf, len }
    }
}

impl From<String> for SharedText {
    fn from(text: String) -> Self {
        let len = text.len();
        SharedText {
            buf: Arc::new(text),
            len,
        }
    }
}

impl std::ops::Deref for SharedText {
    type Target = str;

    fn deref(&self) -> &str {
        &self.buf[..self.len]
    }
}

/// A rendered prompt and how its ids line up with it.
#[derive(Debug, Clone, Default)]
struct Layout {
    /// The rendered text.
    text: SharedText,
    /// Per piece: its kind and the end of its text in `text`.
    pieces: Vec<(PieceKind, usize)>,
    /// Per rendered piece before the split at boundary tokens: its kind and the end of its
    /// split pieces in `pieces` (each rendered piece splits into at least one, so its text ends
    /// where the last of them does; the next render splits only what changed, see
    /// [`split_against`]).
    sources: Vec<(PieceKind, usize)>,
    /// `(piece count, ids)`: after the first `piece count` pieces (ending with a template token,
    /// or none), the ids hold exactly `ids` tokens. Increasing; starts with `(0, 0)`.
    boundaries: Vec<(usize, usize)>,
    /// The render whose text without the generation prompt `text` is, where that render
    /// resumes (a later one that resumes it knows which of its bytes are this text's).
    render: Option<RenderId>,
}

impl Layout {
    /// How many leading pieces of `pieces` equal this layout's (kind and text), given that the
    /// first `known` do.
    fn shared_pieces(&self, pieces: &[Piece<'_>], known: usize) -> usize {
        let mut start = known.checked_sub(1).map_or(0, |i| self.pieces[i].1);
        for (i, (piece, &(kind, end))) in pieces.iter().zip(&self.pieces).enumerate().skip(known) {
            if piece.kind != kind || self.text.get(start..end) != Some(&*piece.text) {
                return i;
            }
            start = end;
        }
        pieces.len().min(self.pieces.len())
    }

    /// The last boundary within the first `shared` pieces.
    fn boundary_within(&self, shared: usize) -> (usize, usize) {
        let at = self.boundaries.partition_point(|&(p, _)| p <= shared);
        self.boundaries[at.saturating_sub(1)]
    }
}

/// The encoding of a longer conversation, planned against the session's state.
#[derive(Clone)]
struct Plan {
    /// The new ids: the session's first `keep` ids, then `tail`.
    keep: usize,
    tail: Vec<u32>,
    layout: Layout,
}

/// Encode `pieces[from..]` (which follow a token, or start the prompt) into `tail`, and
/// extend `layout` with the pieces and the boundary after each token (ids counted from
/// `ids_before`).
fn encode_tail(
    encoder: &PieceEncoder<'_>,
    pieces: &[Piece<'_>],
    from: usize,
    ids_before: usize,
    layout: &mut Layout,
) -> Result<Vec<u32>> {
    let mut out = EncodedChat::default();
    let mut run_start = from;
    for (i, piece) in pieces.iter().enumerate().skip(from) {
        if let PieceKind::Token(_) = piece.kind {
            encoder.encode_continuing(
                &pieces[run_start..=i],
                run_start == 0,
                Tracking::default(),
                &mut out,
            )?;
            run_start = i + 1;
            layout.boundaries.push((i + 1, ids_before + out.ids.len()));
        }
    }
    encoder.encode_continuing(
        &pieces[run_start..],
        run_start == 0,
        Tracking::default(),
        &mut out,
    )?;
    Ok(out.ids)
}

/// Split rendered `pieces` at boundary tokens ([`TokenSplitter::split`]), taking the split of
/// each piece that equals the `previous` render's from its layout instead of searching the
/// text again: a session renders its whole conversation at every step, and only its end
/// changes. The first piece that differs and is template text (the Jinja path renders a long
/// run of it, which the new turn extends) reuses its old split up to a boundary token that
/// lies early enough in the shared text: whether a token matches at a position depends on at
/// most [`TokenSplitter::longest`] bytes from there, and the matcher starts afresh after a
/// match. The first `known` bytes of the pieces' text are known to be `previous`'s (the
/// caller knows where the two renders come from); they are not compared again. Returns the
/// pieces, their sources for the next layout, and how many leading pieces are the previous
/// layout's.
fn split_against<'p>(
    previous: &Layout,
    pieces: &'p [Piece<'_>],
    known: usize,
    splitter: &TokenSplitter,
) -> (Vec<Piece<'p>>, Vec<(PieceKind, usize)>, usize) {
    debug_assert!(known <= previous.text.len());
    let mut out: Vec<Piece<'p>> = Vec::with_capacity(previous.pieces.len() + 8);
    let mut sources = Vec::with_capacity(pieces.len());
    // Where this piece starts, in the new text and, while the pieces so far are the previous
    // render's, in the previous text too.
    let mut at = 0usize;
    let mut reused = 0;
    let mut reusing = true;
    for (u, piece) in pieces.iter().enumerate() {
        // The old piece's text and the end of its split pieces (they start at `out.len()`).
        let old = if reusing {
            previous.sources.get(u).copied()
        } else {
            None
        };
        let old = old
            .filter(|&(kind, _)| kind == piece.kind)
            .and_then(|(_, split_end)| {
                let end = previous.pieces.get(split_end.checked_sub(1)?)?.1;
                previous.text.get(at..end).map(|t| (t, split_end))
            });
        let reuse = |upto: usize, out: &mut Vec<Piece<'p>>| {
            let text: &'p str = &piece.text;
            let mut start = at;
            for &(kind, end) in &previous.pieces[out.len()..upto] {
                out.push(Piece {
                    kind,
                    text: std::borrow::Cow::Borrowed(&text[start - at..end - at]),
                    message: piece.message,
                    body: piece.body,
                });
                start = end;
            }
        };
        // Of this piece, the bytes known to be the old piece's.
        let same = known.saturating_sub(at);
        match old {
            Some((old_text, split_end))
                if old_text.len() == piece.text.len()
                    && (same >= old_text.len() || old_text == &*piece.text) =>
            {
                reuse(split_end, &mut out);
                reused = out.len();
            }
            Some((old_text, split_end)) if piece.kind == PieceKind::TemplateText => {
                reusing = false;
                let from = same.min(old_text.len()).min(piece.text.len());
                let common = from
                    + common_prefix(&old_text.as_bytes()[from..], &piece.text.as_bytes()[from..]);
                // The last old boundary token ending at most `common + 1 - longest` in.
                let limit = (common + 1).saturating_sub(splitter.longest());
                let last =
                    previous.pieces[out.len()..split_end]
                        .iter()
                        .rposition(|&(kind, end)| {
                            matches!(kind, PieceKind::Token(_)) && end - at <= limit
                        });
                match last {
                    Some(k) => {
                        let upto = out.len() + k + 1;
                        let from = previous.pieces[upto - 1].1 - at;
                        reuse(upto, &mut out);
                        reused = out.len();
                        splitter.split_piece(piece, from, &mut out);
                    }
                    None => splitter.split_piece(piece, 0, &mut out),
                }
            }
            _ => {
                reusing = false;
                splitter.split_piece(piece, 0, &mut out);
            }
        }
        at += piece.text.len();
        sources.push((piece.kind, out.len()));
    }
    (out, sources, reused)
}

/// The length of the longest common prefix of `a` and `b` (compared a block at a time: on the
/// Jinja path the two are a whole conversation's text).
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    const BLOCK: usize = 64;
    let n = a.len().min(b.len());
    let mut at = 0;
    while at + BLOCK <= n && a[at..at + BLOCK] == b[at..at + BLOCK] {
        at += BLOCK;
    }
    at + a[at..n]
        .iter()
        .zip(&b[at..n])
        .take_while(|(x, y)| x == y)
        .count()
}

/// Plan the encoding of rendered `pieces` against the state whose layout is `previous`:
/// keep its ids up to the last token both share, encode the rest.
fn plan_pieces(
    previous: &Layout,
    pieces: &Pieces<'_>,
    pe: &PieceEncoder<'_>,
    splitter: &TokenSplitter,
) -> Result<Plan> {
    let plan = plan_without_text(previous, pieces.as_slice(), 0, pe, splitter)?;
    Ok(plan.with_text(pieces.render().into()))
}

/// [`plan_pieces`], keeping the text of `pieces` in the layout without copying it where one
/// piece holds it all (a Jinja render: the whole conversation). The first `known` bytes of
/// their text are known to be `previous`'s ([`split_against`]).
fn plan_owned_pieces(
    previous: &Layout,
    pieces: Pieces<'static>,
    known: usize,
    pe: &PieceEncoder<'_>,
    splitter: &TokenSplitter,
) -> Result<Plan> {
    let plan = plan_without_text(previous, pieces.as_slice(), known, pe, splitter)?;
    Ok(plan.with_text(pieces.into_rendered().into()))
}

/// [`plan_owned_pieces`] of the one piece that is the first `len` bytes of `text`, which the
/// layout then shares.
fn plan_shared_text(
    previous: &Layout,
    text: Arc<String>,
    len: usize,
    known: usize,
    pe: &PieceEncoder<'_>,
    splitter: &TokenSplitter,
) -> Result<Plan> {
    let plan = plan_without_text(
        previous,
        one_piece(&text[..len]).as_slice(),
        known,
        pe,
        splitter,
    )?;
    Ok(plan.with_text(SharedText::new(text, len)))
}

/// A [`Plan`] but for its layout's text, which the caller has.
struct PlanWithoutText {
    keep: usize,
    tail: Vec<u32>,
    layout: Layout,
}

impl PlanWithoutText {
    /// The plan, `text` being the rendered pieces it was made from.
    fn with_text(self, text: SharedText) -> Plan {
        debug_assert_eq!(text.len(), self.layout.pieces.last().map_or(0, |p| p.1));
        Plan {
            keep: self.keep,
            tail: self.tail,
            layout: Layout {
                text,
                ..self.layout
            },
        }
    }
}

fn plan_without_text(
    previous: &Layout,
    pieces: &[Piece<'_>],
    known: usize,
    pe: &PieceEncoder<'_>,
    splitter: &TokenSplitter,
) -> Result<PlanWithoutText> {
    let (pieces, sources, reused) = split_against(previous, pieces, known, splitter);
    let shared = previous.shared_pieces(&pieces, reused);
    let (from, keep) = previous.boundary_within(shared);
    let mut layout = layout_of(SharedText::default(), &pieces, sources, previous, from);
    let tail = encode_tail(pe, &pieces, from, keep, &mut layout)?;
    Ok(PlanWithoutText { keep, tail, layout })
}

/// The layout of `slice` (split from `sources`; `text` is their text, concatenated) with the
/// boundaries of `previous` up to piece `shared`.
fn layout_of(
    text: SharedText,
    slice: &[Piece<'_>],
    sources: Vec<(PieceKind, usize)>,
    previous: &Layout,
    shared: usize,
) -> Layout {
    let mut kinds = Vec::with_capacity(slice.len());
    let mut end = 0;
    for p in slice {
        end += p.text.len();
        kinds.push((p.kind, end));
    }
    let kept = previous.boundaries.partition_point(|&(p, _)| p <= shared);
    Layout {
        text,
        pieces: kinds,
        sources,
        boundaries: previous.boundaries[..kept.max(1)].to_vec(),
        render: None,
    }
}

/// The generation prompt for the session's messages as they are: its plan, which
/// [`Session::generation_prompt`] computed last and [`Session::append_completion`] starts from
/// (the model's turn follows that prompt), or its pieces as the last append rendered them, to
/// be planned when asked for (an append that is not followed by a prompt does not pay for
/// one). Cleared by every change of the session.
#[derive(Clone)]
enum Prompt {
    Planned(Arc<Plan>),
    /// The pieces of the render whose text without the prompt the session's layout is.
    Rendered(RenderedPrompt),
}

/// The pieces of [`Prompt::Rendered`].
#[derive(Clone)]
enum RenderedPrompt {
    /// One piece of template text, which the layout's text begins: the first `at` bytes of
    /// the buffer the layout shares ([`SplitText::Whole`]).
    Whole(Arc<String>, usize),
    Pieces(Arc<Pieces<'static>>),
}

#[derive(Default)]
struct PromptCache(std::sync::Mutex<Option<Prompt>>);

impl PromptCache {
    fn get(&self) -> Option<Prompt> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set(&self, prompt: Option<Prompt>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = prompt;
    }
}

impl Clone for PromptCache {
    fn clone(&self) -> Self {
        PromptCache(std::sync::Mutex::new(self.get()))
    }
}

impl std::fmt::Debug for PromptCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromptCache").finish_non_exhaustive()
    }
}

/// A conversation encoded incrementally (see the module documentation). A session belongs
/// to one encoder: its ids, and what it keeps between renders, are that encoder's.
#[derive(Debug, Clone)]
pub struct Session {
    options: EncodeOptions,
    /// `options` with the generation prompt (kept, not rebuilt: they hold the tools).
    prompt_options: EncodeOptions,
    on_rewrite: OnRewrite,
    messages: Vec<Message>,
    ids: Vec<u32>,
    layout: Layout,
    /// What the Jinja path keeps between renders of this conversation.
    memo: RenderMemo,
    prompt: PromptCache,
}

impl Session {
    /// An empty session. `options` are those of every render (its `add_generation_prompt` and
    /// `continue_final_message` are ignored: [`Session::generation_prompt`] adds the prompt).
    pub fn new(options: EncodeOptions, on_rewrite: OnRewrite) -> Self {
        let options = EncodeOptions {
            add_generation_prompt: false,
            continue_final_message: false,
            ..options
        };
        Session {
            prompt_options: EncodeOptions {
                add_generation_prompt: true,
                ..options.clone()
            },
            options,
            on_rewrite,
            messages: Vec::new(),
            ids: Vec::new(),
            layout: Layout {
                boundaries: vec![(0, 0)],
                ..Layout::default()
            },
            memo: RenderMemo::default(),
            prompt: PromptCache::default(),
        }
    }

    /// The ids of the conversation so far (no generation prompt).
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// The messages so far.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// What an append does when the template rewrites earlier ids.
    pub fn on_rewrite(&self) -> OnRewrite {
        self.on_rewrite
    }

    /// Whether messages for this session should carry their whole dicts
    /// ([`Message::raw`]): where the checkpoint's template renders them (the Jinja path, or
    /// tools, which a native format hands to the template). The template then sees every
    /// key, and the session recognizes messages it has converted (and rendered) by their
    /// dicts, instead of converting them again at every render.
    pub fn keeps_dicts(&self, encoder: &Encoder) -> bool {
        encoder.is_jinja() || crate::message::uses_tools(&[], &self.options.kwargs)
    }

    /// Plan the encoding of `messages` (the session's, extended) with or without the
    /// generation prompt.
    fn plan(&self, encoder: &Encoder, messages: &[Message], agp: bool) -> Result<Plan> {
        let options = if agp {
            &self.prompt_options
        } else {
            &self.options
        };
        let planned = encoder.with_rendered_pieces(
            messages,
            options,
            Some(&self.memo),
            |pieces, pe, splitter| plan_pieces(&self.layout, pieces, pe, splitter),
        )?;
        match planned {
            Some(plan) => Ok(plan),
            None => {
                // mistral-common: the whole conversation, compared id by id.
                let tail = encoder.encode(messages, options)?;
                Ok(Plan {
                    keep: 0,
                    tail,
                    layout: self.layout.clone(),
                })
            }
        }
    }

    /// The plan of `messages`, and the pieces with the generation prompt, from one render
    /// where the template allows it (see [`crate::template::ChatTemplate::render_data_split`]).
    /// `None` where it does not, or where anything fails (rendering each then raises what
    /// there is to raise).
    fn plan_split(&self, encoder: &Encoder, messages: &[Message]) -> Option<(Plan, Prompt)> {
        encoder
            .with_rendered_pieces_split(
                messages,
                &self.prompt_options,
                Some(&self.memo),
                |split, pe, splitter| {
                    // The bytes the render took from the one this layout holds are not
                    // compared again.
                    let known = match split.resumed {
                        Some((from, known)) if self.layout.render == Some(from) => known,
                        _ => 0,
                    };
                    let (mut plan, prompt) = match split.text {
                        SplitText::Whole { text, at } => (
                            plan_shared_text(&self.layout, text.clone(), at, known, pe, splitter)?,
                            RenderedPrompt::Whole(text, at),
                        ),
                        SplitText::Pieces { without, with } => (
                            plan_owned_pieces(&self.layout, without, known, pe, splitter)?,
                            RenderedPrompt::Pieces(Arc::new(with)),
                        ),
                    };
                    plan.layout.render = split.id;
                    Ok((plan, Prompt::Rendered(prompt)))
                },
            )
            .ok()
            .flatten()
    }

    /// The plan of the generation prompt for the messages as they are (kept until the
    /// session changes): planned from the pieces the last append rendered, or rendered now.
    fn prompt_plan(&self, encoder: &Encoder) -> Result<Arc<Plan>> {
        let planned = match self.prompt.get() {
            Some(Prompt::Planned(plan)) => return Ok(plan),
            Some(Prompt::Rendered(rendered)) => {
                self.prompt.set(None);
                encoder
                    .with_piece_encoder(&self.prompt_options, |pe, splitter| match rendered {
                        // The layout's text is the first `at` bytes of this one.
                        RenderedPrompt::Whole(text, at) => {
                            let len = text.len();
                            plan_shared_text(&self.layout, text, len, at, pe, splitter)
                        }
                        // The plan replaces the pieces, so they are ours to keep in its layout
                        // (cloned only if another thread is planning them too).
                        RenderedPrompt::Pieces(pieces) => {
                            let pieces = Arc::try_unwrap(pieces).unwrap_or_else(|p| (*p).clone());
                            plan_owned_pieces(&self.layout, pieces, 0, pe, splitter)
                        }
                    })
                    .transpose()?
            }
            None => None,
        };
        let plan = Arc::new(match planned {
            Some(plan) => plan,
            None => self.plan(encoder, &self.messages, true)?,
        });
        self.prompt.set(Some(Prompt::Planned(plan.clone())));
        Ok(plan)
    }

    /// Where the planned ids first differ from the session's (its length if they extend them),
    /// or the rewrite error.
    fn check(&self, plan: &Plan, what: &str) -> Result<usize> {
        let old = &self.ids[plan.keep..];
        let same = old
            .iter()
            .zip(&plan.tail)
            .take_while(|(a, b)| a == b)
            .count();
        let start = plan.keep + same;
        if start < self.ids.len() && self.on_rewrite == OnRewrite::Error {
            return Err(TemplateError::whole(format!(
                "{what} changes token {start} of the {} the session holds: this template is not prefix-preserving here \
                 (see Encoder.append_rewrites); pass on_rewrite=\"reencode\" to re-encode instead",
                self.ids.len()
            ))
            .into());
        }
        Ok(start)
    }

    /// Append `new` messages; the ids equal a full encode of all messages (except completion
    /// ids kept as sampled). On error the session is unchanged.
    pub fn append(&mut self, encoder: &Encoder, new: Vec<Message>) -> Result<Appended> {
        let first = self.messages.len();
        let mut messages = std::mem::take(&mut self.messages);
        messages.extend(new);
        // One render gives the generation prompt's plan too, where the template allows it.
        let (plan, prompt) = match self.plan_split(encoder, &messages) {
            Some((plan, prompt)) => (Ok(plan), Some(prompt)),
            None => (self.plan(encoder, &messages, false), None),
        };
        let planned = plan.and_then(|plan| {
            let start = self.check(&plan, &format!("appending message {first}"))?;
            Ok((plan, start))
        });
        let (plan, start) = match planned {
            Ok(p) => p,
            Err(e) => {
                messages.truncate(first);
                self.messages = messages;
                return Err(e);
            }
        };
        self.messages = messages;
        self.commit(plan);
        self.prompt.set(prompt);
        Ok(Appended { start })
    }

    fn commit(&mut self, plan: Plan) {
        self.prompt.set(None);
        self.ids.truncate(plan.keep);
        self.ids.extend(plan.tail);
        self.layout = plan.layout;
    }

    /// The ids of the conversation followed by the generation prompt (what to feed the model
    /// for its next turn). The session is unchanged.
    pub fn generation_prompt(&self, encoder: &Encoder) -> Result<Vec<u32>> {
        let plan = self.prompt_plan(encoder)?;
        self.check(&plan, "the generation prompt")?;
        let mut ids = Vec::with_capacity(plan.keep + plan.tail.len());
        ids.extend_from_slice(&self.ids[..plan.keep]);
        ids.extend_from_slice(&plan.tail);
        Ok(ids)
    }

    /// Append the model's turn as it was sampled after [`Session::generation_prompt`]:
    /// `completion` ids are kept verbatim, and `message` (the parsed turn: content, tool
    /// calls) is what later renders see. If `completion` does not end with one of the
    /// encoder's stop tokens (the engine dropped it, or the length limit cut the turn), the
    /// token the template writes to end the turn is appended. What the template writes after
    /// the turn (ChatML's `"\n"`) is encoded as usual. Returns where the new ids start.
    pub fn append_completion(
        &mut self,
        encoder: &Encoder,
        completion: &[u32],
        message: Message,
    ) -> Result<Appended> {
        let index = self.messages.len();
        if encoder.mistral_common().is_some() {
            return self.append_completion_whole(encoder, completion, message);
        }
        if let Some(text) = encoder.text_encoder() {
            let tokenizer = text.lazy_tokenizer();
            if let Some((k, id)) = completion
                .iter()
                .enumerate()
                .find(|(_, &id)| tokenizer.id_to_token(id).is_none())
            {
                return Err(TemplateError::at(
                    index,
                    format!(
                        "completion id {id} (position {k}) is not in the vocabulary of {} ids",
                        text.tokenizer()?.get_vocab_size(true)
                    ),
                )
                .into());
            }
        }
        let prompt = self.prompt_plan(encoder)?;
        let start = self.check(&prompt, "the generation prompt")?;
        let prompt_pieces = prompt.layout.pieces.len();
        let mut messages = self.messages.clone();
        messages.push(message);
        let stops = encoder.stop_token_ids();
        let last = completion.last().copied();
        let ends_with_stop = last.is_some_and(|id| stops.contains(&id));
        let prompt_layout = &prompt.layout;
        let planned = encoder.with_rendered_pieces(&messages, &self.options, Some(&self.memo), |pieces, pe, splitter| {
            let (split, sources, reused) = split_against(prompt_layout, pieces.as_slice(), 0, splitter);
            let slice = split.as_slice();
            // The render with the turn shares the prompt's pieces up to the turn's text at
            // least; the turn ends at its first end-of-turn token after that.
            let shared = prompt_layout.shared_pieces(slice, reused).min(prompt_pieces);
            let (from, _) = prompt_layout.boundary_within(shared);
            let find = |wanted: &dyn Fn(u32) -> bool| {
                slice[from..].iter().position(|p| matches!(p.kind, PieceKind::Token(id) if wanted(id)))
            };
            let end = match last.filter(|_| ends_with_stop) {
                Some(stop) => find(&|id| id == stop).or_else(|| find(&|id| stops.contains(&id))),
                None => find(&|id| stops.contains(&id)),
            }
            .map(|i| from + i)
            .ok_or_else(|| {
                TemplateError::at(
                    index,
                    "the template writes no end-of-turn token after this message, so the completion cannot be \
                     placed in the prompt",
                )
            })?;
            let mut ids = self.ids[..prompt.keep].to_vec();
            ids.extend(&prompt.tail);
            ids.extend_from_slice(completion);
            if !ends_with_stop {
                let PieceKind::Token(id) = slice[end].kind else {
                    unreachable!("end is a token")
                };
                ids.push(id);
            }
            let mut layout = layout_of(pieces.render().into(), slice, sources, prompt_layout, from);
            layout.boundaries.push((end + 1, ids.len()));
            let after = encode_tail(pe, slice, end + 1, ids.len(), &mut layout)?;
            ids.extend(after);
            Ok((ids, layout))
        })?;
        let (ids, layout) = planned.expect("the template route renders pieces");
        self.prompt.set(None);
        self.messages = messages;
        self.ids = ids;
        self.layout = layout;
        Ok(Appended { start })
    }
}

impl Session {
    /// [`Session::append_completion`] on the mistral-common route, which encodes each message
    /// on its own and re-encodes the whole conversation on every append: the completion is
    /// kept when it is exactly the ids mistral-common gives the parsed message (its stop token
    /// added when missing), so that later appends keep it too. Ids that differ (the model
    /// tokenized its text another way) are a rewrite: an error, or with
    /// [`OnRewrite::Reencode`] mistral-common's ids of the message.
    fn append_completion_whole(
        &mut self,
        encoder: &Encoder,
        completion: &[u32],
        message: Message,
    ) -> Result<Appended> {
        let index = self.messages.len();
        encoder
            .decode(completion)
            .map_err(|e| TemplateError::at(index, format!("completion {e}")))?;
        let prompt = self.prompt_plan(encoder)?;
        let start = self.check(&prompt, "the generation prompt")?;
        let mut messages = self.messages.clone();
        messages.push(message);
        let full = self.plan(encoder, &messages, false)?;
        let mut sampled = self.ids[..prompt.keep].to_vec();
        sampled.extend(&prompt.tail);
        let prompt_len = sampled.len();
        sampled.extend_from_slice(completion);
        let stops = encoder.stop_token_ids();
        if !completion.last().is_some_and(|id| stops.contains(id)) {
            // The route ends a turn with `</s>`, its one stop token.
            sampled.extend(stops.first());
        }
        let mut ids = self.ids[..full.keep].to_vec();
        ids.extend(&full.tail);
        if !ids.starts_with(&sampled) {
            let at = ids.iter().zip(&sampled).take_while(|(a, b)| a == b).count();
            if self.on_rewrite == OnRewrite::Error {
                return Err(TemplateError::at(
                    index,
                    format!(
                        "the completion's id {} differs from mistral-common's encoding of its parsed message \
                         (the model tokenized the text another way, or the message is not what it generated); \
                         the mistral-common route re-encodes whole conversations, so it cannot keep these ids: \
                         pass on_rewrite=\"reencode\" to take mistral-common's ids",
                        at.saturating_sub(prompt_len)
                    ),
                )
                .into());
            }
        }
        self.prompt.set(None);
        self.messages = messages;
        self.ids = ids;
        self.layout = full.layout;
        Ok(Appended { start })
    }
}

/// Where appending messages can change earlier tokens with this encoder's format (its
/// template's output for N messages is not a prefix of its output for N+1): one line per
/// case. Empty: prefix-preserving. `None`: not known (the Jinja path renders arbitrary
/// templates; a session detects rewrites as they happen).
pub fn append_rewrites(encoder: &Encoder) -> Option<&'static [&'static str]> {
    const QWEN_TOOLS: &str = "consecutive tool results share one user turn (<tool_response> blocks): append all the results of \
         one step in one call";
    const MISTRAL_LAST_USER: &str = "the system prompt (and [AVAILABLE_TOOLS]) is written into the last user turn: appending a user \
         message moves it";
    let rewrites: &'static [&'static str] = match encoder.format_name() {
        "qwen3" => &[
            "the reasoning (<think> block) of assistant turns before the last user message is dropped once a new \
             user message follows",
            QWEN_TOOLS,
        ],
        "qwen2.5" => &[QWEN_TOOLS],
        "llama-3.1" | "llama-3.2" => &[
            "with tools (tools_in_user_message=True, the default) the tool definitions are written into the first \
             user message: nothing renders before it",
        ],
        "mistral-v3" | "mistral-v3-tekken" => &[MISTRAL_LAST_USER],
        "mistral-common-v2" | "mistral-common-v3" | "mistral-common-v3-tekken" => &[MISTRAL_LAST_USER],
        crate::render::jinja::FORMAT_NAME | crate::render::jinja::EXTERNAL_FORMAT_NAME => return None,
        _ => &[],
    };
    Some(rewrites)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pieces::{Pieces, TemplateToken};

    #[test]
    fn layouts_share_pieces_by_kind_and_text() {
        let eot = TemplateToken {
            id: 9,
            text: "<eot>".into(),
        };
        let mut a = Pieces::new();
        a.text("user: ");
        a.content("hi");
        a.token(&eot);
        a.text("\n");
        let base = Layout {
            boundaries: vec![(0, 0)],
            ..Layout::default()
        };
        let layout = layout_of(a.render().into(), a.as_slice(), Vec::new(), &base, 0);
        assert_eq!(&*layout.text, "user: hi<eot>\n");
        let mut b = Pieces::new();
        b.text("user: ");
        b.content("hi");
        b.token(&eot);
        b.text("\n");
        b.text("bot: ");
        assert_eq!(layout.shared_pieces(b.as_slice(), 0), 4);
        assert_eq!(layout.shared_pieces(b.as_slice(), 2), 4);
        let mut c = Pieces::new();
        c.text("user: ");
        c.text("hi"); // same text, template text instead of content
        assert_eq!(layout.shared_pieces(c.as_slice(), 0), 1);
        let with_boundary = Layout {
            boundaries: vec![(0, 0), (3, 4)],
            ..layout
        };
        assert_eq!(with_boundary.boundary_within(4), (3, 4));
        assert_eq!(with_boundary.boundary_within(2), (0, 0));
    }

    /// Splitting against the previous render's layout gives exactly the split of the whole
    /// render, whatever changed: renders extended at the end (a session's step), pieces
    /// changed or cut anywhere, tokens cut in half at the edge of what is shared, a matched
    /// token that is not a boundary (it takes whitespace) beside boundary ones.
    #[test]
    fn splitting_against_a_layout_equals_splitting_afresh() {
        use crate::control_tokens::AddedTokenInfo;
        let added = |id: u32, content: &str, lstrip: bool| AddedTokenInfo {
            id,
            content: content.into(),
            special: true,
            lstrip,
            rstrip: false,
            single_word: false,
            normalized: false,
        };
        let splitter = TokenSplitter::new(&[
            added(1, "<|im_start|>", false),
            added(2, "<|im_end|>", false),
            added(3, "<s>", false),
            added(4, "<|im_end|>x", true),
            added(5, "<|im", false),
        ]);
        let fragments = [
            "<|im_start|>",
            "<|im_end|>",
            "<|im",
            "_end|>",
            "user\n",
            "<s>",
            "<",
            "|",
            "hi ",
            "x",
            "<|im_end|>x",
            "é",
        ];
        let mut rng = crate::text::TestRng(0x2545_f491_4f6c_dd1d);
        let mut next = |n: usize| rng.below(n);
        let eot = crate::pieces::TemplateToken {
            id: 2,
            text: "<|im_end|>".into(),
        };
        let base = Layout {
            boundaries: vec![(0, 0)],
            ..Layout::default()
        };
        let mut compared = 0;
        for _ in 0..3000 {
            let mut texts: Vec<(u8, String)> = (0..1 + next(5))
                .map(|_| {
                    let text: String = (0..next(12))
                        .map(|_| fragments[next(fragments.len())])
                        .collect();
                    (next(4) as u8, text)
                })
                .collect();
            let build = |texts: &[(u8, String)]| {
                let mut p = Pieces::new();
                for (kind, t) in texts {
                    match kind {
                        0 => p.content(t.clone()),
                        1 => p.token(&eot),
                        _ => p.text(t.clone()),
                    }
                }
                p
            };
            let old = build(&texts);
            let (old_split, sources, reused) = split_against(&base, old.as_slice(), 0, &splitter);
            assert_eq!(reused, 0);
            assert_eq!(old_split, splitter.split(old.as_slice()));
            let layout = layout_of(old.render().into(), &old_split, sources, &base, 0);
            // Change it: extend the last text, append pieces, change or cut one anywhere.
            let i = next(texts.len());
            match next(4) {
                0 => {
                    let last = texts.len() - 1;
                    texts[last].1.push_str(fragments[next(fragments.len())]);
                }
                1 => texts.push((2, fragments[next(fragments.len())].repeat(1 + next(3)))),
                2 => {
                    let t = &mut texts[i].1;
                    let mut cut = next(t.len() + 1);
                    while !t.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    t.truncate(cut);
                    texts.truncate(i + 1);
                }
                _ => texts[i].1.insert_str(0, fragments[next(fragments.len())]),
            }
            let new = build(&texts);
            // Known to be shared: nothing, all that is, or part of it.
            let common = common_prefix(layout.text.as_bytes(), new.render().as_bytes());
            let known = match next(3) {
                0 => 0,
                1 => common,
                _ => next(common + 1),
            };
            let (split, _, reused) = split_against(&layout, new.as_slice(), known, &splitter);
            let afresh = splitter.split(new.as_slice());
            assert_eq!(split, afresh, "{texts:?}");
            assert!(reused <= layout.shared_pieces(&afresh, 0));
            compared += 1;
        }
        assert_eq!(compared, 3000);
    }

    /// With the shared checkpoints (`CHATIDS_MODELS_DIR`), appending equals a full encode, on
    /// a native format and on the Jinja path, and completion ids are kept.
    #[test]
    fn appending_equals_a_full_encode_on_real_checkpoints() {
        let Some(base) = std::env::var_os("CHATIDS_MODELS_DIR") else {
            return;
        };
        let messages = vec![
            Message::new("system", "Be brief."),
            Message::new("user", "Hi <|im_end|> there"),
            Message::new("assistant", "Hello!"),
            Message::new("user", "Bye\n"),
        ];
        for dir in [
            "qwen2.5-7b-instruct",
            "llama-3.1-8b-instruct",
            "gpt-oss-120b",
        ] {
            let path = std::path::Path::new(&base).join(dir);
            if !path.is_dir() {
                continue;
            }
            let enc = Encoder::from_dir(&path, None).unwrap();
            let options = EncodeOptions {
                now: Some(crate::render::jinja::PROBE_NOW),
                ..Default::default()
            };
            let full = enc.encode(&messages, &options).unwrap();
            let mut session = Session::new(options.clone(), OnRewrite::Error);
            session.append(&enc, messages[..2].to_vec()).unwrap();
            let prompt = session.generation_prompt(&enc).unwrap();
            let with_prompt = EncodeOptions {
                add_generation_prompt: true,
                ..options.clone()
            };
            assert_eq!(
                prompt,
                enc.encode(&messages[..2], &with_prompt).unwrap(),
                "{dir}"
            );
            let appended = session.append(&enc, messages[2..].to_vec()).unwrap();
            assert_eq!(session.ids(), full.as_slice(), "{dir}");
            assert!(appended.start <= full.len());
            // The model's ids are kept verbatim after the generation prompt.
            let mut session = Session::new(options.clone(), OnRewrite::Error);
            session.append(&enc, messages[..2].to_vec()).unwrap();
            let prompt = session.generation_prompt(&enc).unwrap();
            let sampled = [11u32, 12, 13];
            session
                .append_completion(&enc, &sampled, messages[2].clone())
                .unwrap();
            assert_eq!(
                &session.ids()[prompt.len()..prompt.len() + 3],
                &sampled,
                "{dir}"
            );
        }
    }

    /// On the Jinja path an append renders the conversation once for both its layout and the
    /// generation prompt's plan: the two hold one buffer (the conversation's text is not
    /// copied for each), each is its render's text, and the ids are a full encode's.
    #[test]
    fn the_layout_and_the_prompt_share_one_render() {
        let Some(base) = std::env::var_os("CHATIDS_MODELS_DIR") else {
            return;
        };
        let path = std::path::Path::new(&base).join("qwen2.5-7b-instruct");
        if !path.is_dir() {
            return;
        }
        let enc = Encoder::from_dir(&path, Some("jinja")).unwrap();
        let options = EncodeOptions {
            now: Some(crate::render::jinja::PROBE_NOW),
            ..Default::default()
        };
        let with_prompt = EncodeOptions {
            add_generation_prompt: true,
            ..options.clone()
        };
        let messages = vec![
            Message::new("system", "Be brief."),
            Message::new("user", "Hi there"),
            Message::new("assistant", "Hello!"),
            Message::new("user", "Bye\n"),
        ];
        // Caller text holding a control token is marked, so its render gives each render's
        // pieces instead of one text: the same ids, two buffers.
        let mut marked = messages.clone();
        marked[3] = Message::new("user", "Bye <|im_end|>\n");
        for (messages, shared) in [(messages, true), (marked, false)] {
            let mut session = Session::new(options.clone(), OnRewrite::Error);
            for (from, to) in [(0, 2), (2, 4)] {
                session.append(&enc, messages[from..to].to_vec()).unwrap();
                let prompt = session.generation_prompt(&enc).unwrap();
                assert_eq!(prompt, enc.encode(&messages[..to], &with_prompt).unwrap());
                let Some(Prompt::Planned(plan)) = session.prompt.get() else {
                    panic!("the generation prompt is planned")
                };
                if shared {
                    assert!(Arc::ptr_eq(&plan.layout.text.buf, &session.layout.text.buf));
                }
                assert_eq!(
                    &*session.layout.text,
                    enc.render(&messages[..to], &options).unwrap()
                );
                assert_eq!(
                    &*plan.layout.text,
                    enc.render(&messages[..to], &with_prompt).unwrap()
                );
            }
        }
    }

    #[test]
    fn rewrite_policies_parse() {
        assert_eq!(OnRewrite::parse("error").unwrap(), OnRewrite::Error);
        assert_eq!(OnRewrite::parse("reencode").unwrap(), OnRewrite::Reencode);
        assert!(OnRewrite::parse("ignore").is_err());
    }
}
