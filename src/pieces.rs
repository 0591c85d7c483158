//! The piece stream: what a format renderer emits.
//!
//! A format walks the messages and emits, in order, template control tokens (emitted as
//! ids), template text, and content (text that comes from the caller: message contents,
//! role names, template arguments). Every piece carries the index of the message it
//! belongs to. Consecutive text pieces form one *run*: special tokens are the only hard
//! BPE boundaries, so a run is encoded as one unit (see [`crate::piece_encoder`]).

use std::borrow::Cow;

/// A control token that a format writes, resolved against the checkpoint's tokenizer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateToken {
    /// The token id.
    pub id: u32,
    /// The token's text (`"<|eot_id|>"`), used when rendering.
    pub text: String,
}

/// What a piece is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PieceKind {
    /// A template control token, emitted as its id.
    Token(u32),
    /// Text the template writes itself; added tokens in it are matched.
    TemplateText,
    /// Text that comes from the caller (message content, role, template argument). With
    /// `sanitize_control_tokens` its control tokens are encoded as plain text.
    Content,
    /// A hard BPE boundary with no text: where the template cut a sanitized control token
    /// out of caller text (`content.split('</think>')`) and left a lone marker. As in
    /// transformers' `encode_marked_chat`, the marker is dropped but the texts on either side
    /// are encoded apart, so they can never join into a control token.
    Break,
}

/// One piece of a rendered conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece<'a> {
    /// What the piece is.
    pub kind: PieceKind,
    /// Its text (for a token, the token's text).
    pub text: Cow<'a, str>,
    /// Index of the message it belongs to; `None` for template text outside any message
    /// (a default system prompt, the generation prompt).
    pub message: Option<u32>,
    /// Whether the piece is in the *body* of its message: what follows the role header, up
    /// to and including the token that ends the turn (`<|eot_id|>`, `<|im_end|>`, `</s>`,
    /// `<end_of_turn>`), but not the separator after it. For an assistant message this is
    /// exactly what the model generates after the generation prompt, so it is what a loss
    /// mask trains (see [`crate::training`]).
    pub body: bool,
}

impl<'a> Piece<'a> {
    /// The piece with an empty text (to copy its kind, message and body flag).
    pub fn clone_shallow(&self) -> Piece<'a> {
        Piece {
            kind: self.kind,
            text: Cow::Borrowed(""),
            message: self.message,
            body: self.body,
        }
    }
}

/// A group of consecutive pieces that the encoder handles together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment<'p, 'a> {
    /// A template control token.
    Token(&'p Piece<'a>),
    /// A run of consecutive text pieces (template text and content), encoded as one unit.
    Run(&'p [Piece<'a>]),
}

/// The ordered pieces of one conversation, built by a format renderer.
#[derive(Debug, Default, Clone)]
pub struct Pieces<'a> {
    items: Vec<Piece<'a>>,
    message: Option<u32>,
    body: bool,
}

impl<'a> Pieces<'a> {
    /// An empty stream.
    pub fn new() -> Self {
        Pieces::default()
    }

    /// Tag the pieces that follow with message `index` (`None`: no message), in its header
    /// (not its body) until [`Pieces::begin_body`].
    pub fn set_message(&mut self, index: Option<usize>) {
        self.message = index.map(|i| i as u32);
        self.body = false;
    }

    /// The pieces that follow are the body of the current message (after its role header).
    pub fn begin_body(&mut self) {
        self.body = true;
    }

    /// The body of the current message ended (after its end-of-turn token).
    pub fn end_body(&mut self) {
        self.body = false;
    }

    /// Whether the pieces that follow are in a message body.
    pub fn in_body(&self) -> bool {
        self.body
    }

    /// Emit a template control token.
    pub fn token(&mut self, token: &'a TemplateToken) {
        self.items.push(Piece {
            kind: PieceKind::Token(token.id),
            text: Cow::Borrowed(&token.text),
            message: self.message,
            body: self.body,
        });
    }

    /// Emit template text. Empty text is skipped.
    pub fn text(&mut self, text: impl Into<Cow<'a, str>>) {
        self.push(PieceKind::TemplateText, text.into());
    }

    /// Emit caller-supplied text. Empty text is skipped.
    pub fn content(&mut self, text: impl Into<Cow<'a, str>>) {
        self.push(PieceKind::Content, text.into());
    }

    /// Emit a hard boundary inside a run of text ([`PieceKind::Break`]).
    pub fn boundary(&mut self) {
        self.items.push(Piece {
            kind: PieceKind::Break,
            text: Cow::Borrowed(""),
            message: self.message,
            body: self.body,
        });
    }

    fn push(&mut self, kind: PieceKind, text: Cow<'a, str>) {
        if !text.is_empty() {
            self.items.push(Piece {
                kind,
                text,
                message: self.message,
                body: self.body,
            });
        }
    }

    /// Replace every piece's message index `i` by `map[i]` (after the input policies renumbered
    /// the messages).
    pub fn remap_messages(&mut self, map: &[usize]) {
        for piece in &mut self.items {
            if let Some(m) = piece.message {
                piece.message = map.get(m as usize).map(|&o| o as u32).or(Some(m));
            }
        }
    }

    /// The pieces in order.
    pub fn as_slice(&self) -> &[Piece<'a>] {
        &self.items
    }

    /// The rendered prompt: every piece's text, concatenated. This is what
    /// `apply_chat_template(..., tokenize=False)` returns.
    pub fn render(&self) -> String {
        self.rendered().into_owned()
    }

    /// [`Pieces::render`], taking the text out of the one piece that holds it all (not
    /// copying it, where the piece owns it).
    pub fn into_rendered(mut self) -> String {
        match self.items.len() {
            0 => String::new(),
            1 => self
                .items
                .pop()
                .map(|p| p.text.into_owned())
                .unwrap_or_default(),
            _ => self.render(),
        }
    }

    /// [`Pieces::render`], borrowed when one piece holds all the text (a Jinja render
    /// without markers is one piece: the whole conversation, which is then not copied).
    pub fn rendered(&self) -> Cow<'_, str> {
        match &self.items[..] {
            [] => Cow::Borrowed(""),
            [only] => Cow::Borrowed(&only.text),
            items => {
                let mut s = String::with_capacity(items.iter().map(|p| p.text.len()).sum());
                for p in items {
                    s.push_str(&p.text);
                }
                Cow::Owned(s)
            }
        }
    }

    /// Keep only the first `offset` bytes of the rendered prompt ([`Pieces::render`]): pieces
    /// after it are dropped, the text piece it falls in is cut. A token the offset falls inside
    /// is dropped whole. `offset` must be on a character boundary.
    pub fn truncate_rendered(&mut self, offset: usize) {
        let mut start = 0;
        for (i, piece) in self.items.iter_mut().enumerate() {
            let end = start + piece.text.len();
            if end <= offset {
                start = end;
                continue;
            }
            let keep = offset - start;
            if keep == 0 || matches!(piece.kind, PieceKind::Token(_)) {
                self.items.truncate(i);
            } else {
                cut_cow(&mut piece.text, keep);
                self.items.truncate(i + 1);
            }
            return;
        }
    }

    /// Remove trailing whitespace (Python's `str.rstrip()`) from the rendered prompt, across
    /// text pieces; a token ends the stripping.
    pub fn rstrip_python(&mut self) {
        while let Some(last) = self.items.last_mut() {
            if matches!(last.kind, PieceKind::Token(_)) {
                return;
            }
            let kept = last
                .text
                .trim_end_matches(crate::pystr::is_python_whitespace)
                .len();
            if kept > 0 {
                cut_cow(&mut last.text, kept);
                return;
            }
            self.items.pop();
        }
    }

    /// The segments: each token on its own, and each maximal run of text pieces.
    pub fn segments(&self) -> impl Iterator<Item = Segment<'_, 'a>> {
        segments(&self.items)
    }
}

/// Keep the first `len` bytes of `text`.
fn cut_cow(text: &mut Cow<'_, str>, len: usize) {
    match text {
        Cow::Borrowed(s) => *s = &s[..len],
        Cow::Owned(s) => s.truncate(len),
    }
}

/// Split `pieces` into tokens and maximal runs of consecutive text pieces.
pub fn segments<'p, 'a>(pieces: &'p [Piece<'a>]) -> impl Iterator<Item = Segment<'p, 'a>> {
    let mut rest = pieces;
    std::iter::from_fn(move || {
        let first = rest.first()?;
        if let PieceKind::Token(_) = first.kind {
            rest = &rest[1..];
            return Some(Segment::Token(first));
        }
        let len = rest
            .iter()
            .position(|p| matches!(p.kind, PieceKind::Token(_)))
            .unwrap_or(rest.len());
        let (run, tail) = rest.split_at(len);
        rest = tail;
        Some(Segment::Run(run))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tok(id: u32, text: &str) -> TemplateToken {
        TemplateToken {
            id,
            text: text.to_string(),
        }
    }

    #[test]
    fn pieces_carry_message_index_and_skip_empty_text() {
        let start = tok(1, "<s>");
        let mut p = Pieces::new();
        p.token(&start);
        p.set_message(Some(0));
        p.text("user\n");
        p.content("");
        p.content("hi");
        p.set_message(None);
        p.text("tail");
        let kinds: Vec<_> = p
            .as_slice()
            .iter()
            .map(|x| (x.kind, x.text.as_ref(), x.message))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (PieceKind::Token(1), "<s>", None),
                (PieceKind::TemplateText, "user\n", Some(0)),
                (PieceKind::Content, "hi", Some(0)),
                (PieceKind::TemplateText, "tail", None),
            ]
        );
        assert_eq!(p.render(), "<s>user\nhitail");
    }

    #[test]
    fn runs_merge_adjacent_text_and_content_between_tokens() {
        let a = tok(1, "<a>");
        let b = tok(2, "<b>");
        let mut p = Pieces::new();
        p.text("x");
        p.content("y");
        p.token(&a);
        p.token(&b);
        p.content("z");
        p.text("w");
        p.token(&a);
        let shape: Vec<String> = p
            .segments()
            .map(|s| match s {
                Segment::Token(t) => format!("T{}", t.text),
                Segment::Run(r) => format!(
                    "R[{}]",
                    r.iter()
                        .map(|x| x.text.as_ref())
                        .collect::<Vec<_>>()
                        .join("|")
                ),
            })
            .collect();
        assert_eq!(shape, vec!["R[x|y]", "T<a>", "T<b>", "R[z|w]", "T<a>"]);
    }

    #[test]
    fn truncating_cuts_text_and_drops_what_follows() {
        let a = tok(1, "<a>");
        let mut p = Pieces::new();
        p.text("ab");
        p.content(String::from("cd  "));
        p.token(&a);
        p.text("tail");
        let mut q = p.clone();
        q.truncate_rendered(3);
        assert_eq!(q.render(), "abc");
        let mut q = p.clone();
        q.truncate_rendered(2);
        assert_eq!(q.render(), "ab");
        let mut q = p.clone();
        q.truncate_rendered(7);
        assert_eq!(q.render(), "abcd  ", "a token the cut falls in is dropped");
        q.rstrip_python();
        assert_eq!(q.render(), "abcd");
        let mut q = p.clone();
        q.truncate_rendered(9);
        q.rstrip_python();
        assert_eq!(q.render(), "abcd  <a>", "a token stops rstrip");
        let mut blank = Pieces::new();
        blank.text("x");
        blank.text(" \n");
        blank.content("\u{1f}\t");
        blank.rstrip_python();
        assert_eq!(
            blank.render(),
            "x",
            "Python whitespace (U+001F too), across pieces"
        );
    }

    #[test]
    fn empty_stream_has_no_segments() {
        let p = Pieces::new();
        assert_eq!(p.segments().count(), 0);
        assert_eq!(p.render(), "");
    }
}
