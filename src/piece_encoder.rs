//! Turning a piece stream into token ids.
//!
//! Template tokens become their ids. Each run of consecutive text pieces is encoded as one
//! unit by the [`TextEncoder`], because special tokens are the only hard BPE boundaries.
//!
//! With `sanitize_control_tokens`, the control tokens found in content pieces are encoded as
//! plain text, exactly as transformers' `apply_chat_template(..., sanitize_control_tokens=True)`
//! does it (`encode_marked_chat`): the run is cut around each such token; the token's text is
//! encoded alone without added-token matching; and the text after it is encoded on its own.
//! Both use transformers' newline trick: encode `"\n" + text` and drop the leading newline
//! ids, or, when the newline merged with the text, encode `text` alone.

use std::ops::Range;

use crate::control_tokens::ControlTokens;
use crate::error::{Result, TemplateError};
use crate::pieces::{segments, Piece, PieceKind, Segment};
use crate::text::{TextEncoder, TextOptions};

/// The ids of one conversation, with optional per-token provenance.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EncodedChat {
    /// Token ids.
    pub ids: Vec<u32>,
    /// Per token, the index of the message it came from (`-1`: template text outside any
    /// message). Empty unless asked for.
    pub message_indices: Vec<i32>,
    /// Per token, whether it starts inside caller-supplied text (content, role, template
    /// argument) rather than template text or a template token. Empty unless asked for.
    pub from_content: Vec<bool>,
    /// Per token, the message whose body (see [`crate::pieces::Piece::body`]) the token
    /// overlaps, or `-1`. A token that straddles a body boundary (BPE merged header and body
    /// text) counts as body, as transformers' `{% generation %}` masks count it. Empty unless
    /// asked for.
    pub body_messages: Vec<i32>,
}

/// Which per-token provenance to record besides the ids.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tracking {
    /// Record [`EncodedChat::message_indices`].
    pub message_indices: bool,
    /// Record [`EncodedChat::from_content`].
    pub from_content: bool,
    /// Record [`EncodedChat::body_messages`].
    pub body: bool,
}

impl Tracking {
    /// Everything.
    pub const ALL: Tracking = Tracking {
        message_indices: true,
        from_content: true,
        body: true,
    };

    fn any(self) -> bool {
        self.message_indices || self.from_content || self.body
    }
}

/// Encodes piece streams with one text encoder and one sanitizing policy.
pub struct PieceEncoder<'e> {
    /// The text encoder for runs.
    pub text: &'e dyn TextEncoder,
    /// The control tokens to neutralise in content, or `None` to parse content like template
    /// text (plain `apply_chat_template`).
    pub sanitizer: Option<&'e ControlTokens>,
    /// The ids of `"\n"` encoded at the start of a string (for the newline trick).
    pub newline_ids: &'e [u32],
}

/// How one fragment of a run is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FragmentMode {
    /// Plainly, with added tokens matched.
    Plain { at_start: bool },
    /// Right after a sanitized token: newline trick, added tokens matched.
    AfterSanitized,
}

/// A control token found in a content piece of a run, or a [`PieceKind::Break`] (`id`
/// `None`, an empty range): either way the run is cut there.
#[derive(Debug, Clone)]
struct Sanitized {
    range: Range<usize>,
    id: Option<u32>,
    piece: usize,
}

impl<'e> PieceEncoder<'e> {
    /// Encode `pieces`, appending to `out`.
    pub fn encode(
        &self,
        pieces: &[Piece<'_>],
        tracking: Tracking,
        out: &mut EncodedChat,
    ) -> Result<()> {
        self.encode_continuing(pieces, true, tracking, out)
    }

    /// Encode `pieces` that follow a template token of the same prompt (`at_start` false) or
    /// start it (`at_start` true): a token is a hard BPE boundary, so the pieces after it
    /// encode the same whatever came before (see [`crate::session`]).
    pub fn encode_continuing(
        &self,
        pieces: &[Piece<'_>],
        mut at_start: bool,
        tracking: Tracking,
        out: &mut EncodedChat,
    ) -> Result<()> {
        let mut buffer = String::new();
        for segment in segments(pieces) {
            match segment {
                Segment::Token(piece) => {
                    let PieceKind::Token(id) = piece.kind else {
                        unreachable!("segments() yields tokens here")
                    };
                    out.ids.push(id);
                    record(out, tracking, 1, piece, false);
                }
                Segment::Run(run) => self.encode_run(run, at_start, tracking, &mut buffer, out)?,
            }
            at_start = false;
        }
        Ok(())
    }

    fn encode_run(
        &self,
        run: &[Piece<'_>],
        at_start: bool,
        tracking: Tracking,
        buffer: &mut String,
        out: &mut EncodedChat,
    ) -> Result<()> {
        let text: &str = if run.len() == 1 {
            &run[0].text
        } else {
            buffer.clear();
            run.iter().for_each(|p| buffer.push_str(&p.text));
            buffer
        };
        let sanitized = self.find_control_tokens(run, text);
        let mut cursor = 0;
        let mut after_sanitized = false;
        for s in &sanitized {
            if cursor < s.range.start {
                let mode = if after_sanitized {
                    FragmentMode::AfterSanitized
                } else {
                    FragmentMode::Plain {
                        at_start: at_start && cursor == 0,
                    }
                };
                self.encode_fragment(run, text, cursor..s.range.start, mode, tracking, out)?;
            }
            if let Some(id) = s.id {
                self.encode_sanitized(&text[s.range.clone()], id, &run[s.piece], tracking, out)?;
            }
            cursor = s.range.end;
            after_sanitized = true;
        }
        if cursor < text.len() {
            let mode = if after_sanitized {
                FragmentMode::AfterSanitized
            } else {
                FragmentMode::Plain {
                    at_start: at_start && cursor == 0,
                }
            };
            self.encode_fragment(run, text, cursor..text.len(), mode, tracking, out)?;
        }
        Ok(())
    }

    /// The control tokens to encode as plain text in `run` (whose joined text is `text`), in
    /// run coordinates, sorted:
    ///
    /// - every control token inside a content piece (transformers' sanitizer), and
    /// - every control token that the added-token matcher would find across a border between
    ///   caller text and template text (or between two caller texts), such as content ending
    ///   in `<|eot` before template text `_id|>`. transformers forms these tokens (it marks
    ///   only whole tokens inside caller strings); chatids encodes them as plain text, so no
    ///   part of caller text ever becomes a control token. A token wholly inside template
    ///   text stays a token.
    fn find_control_tokens(&self, run: &[Piece<'_>], text: &str) -> Vec<Sanitized> {
        let Some(control) = self.sanitizer else {
            return Vec::new();
        };
        let mut found = Vec::new();
        let mut offset = 0;
        for (piece, p) in run.iter().enumerate() {
            if p.kind == PieceKind::Content {
                found.extend(control.find_iter(&p.text).map(|m| Sanitized {
                    range: offset + m.start..offset + m.end,
                    id: Some(m.id),
                    piece,
                }));
            } else if p.kind == PieceKind::Break {
                found.push(Sanitized {
                    range: offset..offset,
                    id: None,
                    piece,
                });
            }
            offset += p.text.len();
        }
        if run.len() > 1 && run.iter().any(|p| p.kind == PieceKind::Content) {
            let crossing = self.find_crossing_tokens(control, run, text, &found);
            if !crossing.is_empty() {
                found.extend(crossing);
                found.sort_by_key(|s| s.range.start);
            }
        }
        found
    }

    /// The control tokens the added-token matcher would find in the text between the
    /// sanitized tokens `inside` that overlap caller text without lying inside one content
    /// piece (see [`Self::find_control_tokens`]).
    fn find_crossing_tokens(
        &self,
        control: &ControlTokens,
        run: &[Piece<'_>],
        text: &str,
        inside: &[Sanitized],
    ) -> Vec<Sanitized> {
        let mut crossing = Vec::new();
        let mut cursor = 0;
        let gaps = inside
            .iter()
            .map(|s| s.range.clone())
            .chain(std::iter::once(text.len()..text.len()));
        for next in gaps {
            let gap = cursor..next.start;
            cursor = next.end;
            for m in control.find_iter(&text[gap.clone()]) {
                let range = gap.start + m.start..gap.start + m.end;
                let owners = pieces_overlapping(run, range.clone());
                if owners.len() < 2 {
                    continue; // inside one piece: template text, or content already found
                }
                if let Some(piece) = owners.clone().find(|&i| run[i].kind == PieceKind::Content) {
                    crossing.push(Sanitized {
                        range,
                        id: Some(m.id),
                        piece,
                    });
                }
            }
        }
        crossing
    }

    fn encode_fragment(
        &self,
        run: &[Piece<'_>],
        text: &str,
        range: Range<usize>,
        mode: FragmentMode,
        tracking: Tracking,
        out: &mut EncodedChat,
    ) -> Result<()> {
        let fragment = &text[range.clone()];
        let owners = pieces_overlapping(run, range.clone());
        let uniform = owners
            .clone()
            .all(|i| same_provenance(&run[i], &run[owners.start], tracking));
        if uniform || !tracking.any() {
            let before = out.ids.len();
            match mode {
                FragmentMode::Plain { at_start } => self.text.encode(
                    fragment,
                    TextOptions {
                        added_tokens: true,
                        at_start,
                    },
                    &mut out.ids,
                )?,
                FragmentMode::AfterSanitized => {
                    self.encode_with_newline_trick(fragment, true, &mut out.ids, None)?
                }
            }
            let owner = &run[owners.start];
            record(
                out,
                tracking,
                out.ids.len() - before,
                owner,
                owner.kind == PieceKind::Content,
            );
            return Ok(());
        }
        let mut starts = Vec::new();
        match mode {
            FragmentMode::Plain { at_start } => self.text.encode_with_starts(
                fragment,
                TextOptions {
                    added_tokens: true,
                    at_start,
                },
                &mut out.ids,
                &mut starts,
            )?,
            FragmentMode::AfterSanitized => {
                self.encode_with_newline_trick(fragment, true, &mut out.ids, Some(&mut starts))?
            }
        }
        for (k, &start) in starts.iter().enumerate() {
            let owner = &run[piece_at(run, range.start + start)];
            if tracking.message_indices {
                out.message_indices
                    .push(owner.message.map_or(-1, |m| m as i32));
            }
            if tracking.from_content {
                out.from_content.push(owner.kind == PieceKind::Content);
            }
            if tracking.body {
                // The token's bytes: up to the next token that starts later (byte-level and
                // byte-fallback tokens of one character share a start).
                let end = starts[k + 1..]
                    .iter()
                    .copied()
                    .find(|&s| s > start)
                    .unwrap_or(fragment.len());
                let body = pieces_overlapping(run, range.start + start..range.start + end)
                    .map(|i| &run[i])
                    .find(|p| p.body)
                    .map_or(-1, |p| p.message.map_or(-1, |m| m as i32));
                out.body_messages.push(body);
            }
        }
        Ok(())
    }

    /// Encode a control token found in content as plain text.
    fn encode_sanitized(
        &self,
        token_text: &str,
        token_id: u32,
        owner: &Piece<'_>,
        tracking: Tracking,
        out: &mut EncodedChat,
    ) -> Result<()> {
        let before = out.ids.len();
        self.encode_with_newline_trick(token_text, false, &mut out.ids, None)?;
        if out.ids[before..].contains(&token_id) {
            let rule = format!(
                "cannot sanitize {token_text:?}: the tokenizer produces its id {token_id} from plain text"
            );
            return Err(match owner.message {
                Some(m) => TemplateError::at(m as usize, rule),
                None => TemplateError::whole(rule),
            }
            .into());
        }
        record(out, tracking, out.ids.len() - before, owner, true);
        Ok(())
    }

    /// transformers' `_encode_chat_piece`: encode `"\n" + text` and drop the newline's ids;
    /// if the newline merged into the text, encode `text` on its own.
    fn encode_with_newline_trick(
        &self,
        text: &str,
        added_tokens: bool,
        ids: &mut Vec<u32>,
        starts: Option<&mut Vec<usize>>,
    ) -> Result<()> {
        let options = TextOptions {
            added_tokens,
            at_start: true,
        };
        let with_newline = format!("\n{text}");
        let mut trial = Vec::new();
        let mut trial_starts = Vec::new();
        match starts {
            None => self.text.encode(&with_newline, options, &mut trial)?,
            Some(_) => self.text.encode_with_starts(
                &with_newline,
                options,
                &mut trial,
                &mut trial_starts,
            )?,
        }
        let n = self.newline_ids.len();
        if trial.len() >= n && &trial[..n] == self.newline_ids {
            ids.extend_from_slice(&trial[n..]);
            if let Some(starts) = starts {
                starts.extend(trial_starts[n..].iter().map(|s| s.saturating_sub(1)));
            }
            return Ok(());
        }
        match starts {
            None => self.text.encode(text, options, ids),
            Some(starts) => self.text.encode_with_starts(text, options, ids, starts),
        }
    }
}

/// Record the provenance of `count` tokens that all come from `owner`.
fn record(
    out: &mut EncodedChat,
    tracking: Tracking,
    count: usize,
    owner: &Piece<'_>,
    from_content: bool,
) {
    let message = owner.message.map_or(-1, |m| m as i32);
    if tracking.message_indices {
        out.message_indices
            .extend(std::iter::repeat_n(message, count));
    }
    if tracking.from_content {
        out.from_content
            .extend(std::iter::repeat_n(from_content, count));
    }
    if tracking.body {
        let body = if owner.body { message } else { -1 };
        out.body_messages.extend(std::iter::repeat_n(body, count));
    }
}

fn same_provenance(a: &Piece<'_>, b: &Piece<'_>, tracking: Tracking) -> bool {
    (!tracking.message_indices || a.message == b.message)
        && (!tracking.from_content || a.kind == b.kind)
        && (!tracking.body || (a.body == b.body && (!a.body || a.message == b.message)))
}

/// Indices of the pieces of `run` that overlap the byte range `range` of the run's text.
fn pieces_overlapping(run: &[Piece<'_>], range: Range<usize>) -> Range<usize> {
    let first = piece_at(run, range.start);
    let last = piece_at(run, range.end.saturating_sub(1).max(range.start));
    first..last + 1
}

/// Index of the piece of `run` that contains byte `offset` of the run's text.
fn piece_at(run: &[Piece<'_>], offset: usize) -> usize {
    let mut end = 0;
    for (i, p) in run.iter().enumerate() {
        end += p.text.len();
        if offset < end {
            return i;
        }
    }
    run.len() - 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pieces::{Pieces, TemplateToken};
    use std::sync::Mutex;

    /// A toy text encoder: every char is its code point, `"\n\n"` merges into id 2000,
    /// and the added tokens `<X>` (id 900) and `<Y>` (id 901) are matched when allowed.
    #[derive(Default)]
    struct ToyEncoder {
        calls: Mutex<Vec<(String, TextOptions)>>,
    }

    impl ToyEncoder {
        fn calls(&self) -> Vec<(String, bool, bool)> {
            self.calls
                .lock()
                .unwrap()
                .iter()
                .map(|(t, o)| (t.clone(), o.added_tokens, o.at_start))
                .collect()
        }
    }

    impl TextEncoder for ToyEncoder {
        fn encode(&self, text: &str, options: TextOptions, ids: &mut Vec<u32>) -> Result<()> {
            self.encode_with_starts(text, options, ids, &mut Vec::new())
        }

        fn encode_with_starts(
            &self,
            text: &str,
            options: TextOptions,
            ids: &mut Vec<u32>,
            starts: &mut Vec<usize>,
        ) -> Result<()> {
            self.calls.lock().unwrap().push((text.to_string(), options));
            let mut i = 0;
            while i < text.len() {
                let rest = &text[i..];
                let (id, len) = if options.added_tokens && rest.starts_with("<X>") {
                    (900, 3)
                } else if options.added_tokens && rest.starts_with("<Y>") {
                    (901, 3)
                } else if rest.starts_with("\n\n") {
                    (2000, 2)
                } else {
                    let c = rest.chars().next().unwrap();
                    (c as u32, c.len_utf8())
                };
                ids.push(id);
                starts.push(i);
                i += len;
            }
            Ok(())
        }
    }

    fn run(
        pieces: &Pieces<'_>,
        sanitize: bool,
        tracking: Tracking,
    ) -> (EncodedChat, Vec<(String, bool, bool)>) {
        let toy = ToyEncoder::default();
        let control = ControlTokens::new(vec![("<X>".into(), 900)]);
        let encoder = PieceEncoder {
            text: &toy,
            sanitizer: sanitize.then_some(&control),
            newline_ids: &[10],
        };
        let mut out = EncodedChat::default();
        encoder
            .encode(pieces.as_slice(), tracking, &mut out)
            .unwrap();
        (out, toy.calls())
    }

    fn ids(s: &str) -> Vec<u32> {
        s.chars().map(|c| c as u32).collect()
    }

    #[test]
    fn template_text_and_content_are_encoded_as_one_unit() {
        let bos = TemplateToken {
            id: 1,
            text: "<s>".into(),
        };
        let mut p = Pieces::new();
        p.token(&bos);
        p.set_message(Some(0));
        p.text("user: ");
        p.content("hi");
        p.token(&bos);
        let (out, calls) = run(&p, true, Tracking::default());
        assert_eq!(calls, vec![("user: hi".to_string(), true, false)]);
        let mut want = vec![1];
        want.extend(ids("user: hi"));
        want.push(1);
        assert_eq!(out.ids, want);
    }

    #[test]
    fn only_a_leading_run_is_at_start() {
        let mut p = Pieces::new();
        p.text("a");
        let (_, calls) = run(&p, false, Tracking::default());
        assert_eq!(calls, vec![("a".to_string(), true, true)]);
    }

    #[test]
    fn without_sanitizing_content_control_tokens_are_parsed() {
        let mut p = Pieces::new();
        p.text("[");
        p.content("a<X>b");
        let (out, calls) = run(&p, false, Tracking::default());
        assert_eq!(calls.len(), 1);
        assert_eq!(out.ids, vec!['[' as u32, 'a' as u32, 900, 'b' as u32]);
    }

    #[test]
    fn sanitizing_cuts_the_run_and_encodes_the_token_as_text() {
        let mut p = Pieces::new();
        p.set_message(Some(3));
        p.text("[");
        p.content("a<X>b<Y>");
        p.text("]");
        let tracking = Tracking {
            message_indices: true,
            from_content: true,
            body: false,
        };
        let (out, calls) = run(&p, true, tracking);
        assert_eq!(
            calls,
            vec![
                ("[a".to_string(), true, true),
                ("\n<X>".to_string(), false, true),
                // <Y> is an added token but not a control token: still matched.
                ("\nb<Y>]".to_string(), true, true),
            ]
        );
        let mut want = ids("[a");
        want.extend(ids("<X>"));
        want.extend([b'b' as u32, 901, b']' as u32]);
        assert_eq!(out.ids, want);
        assert!(!out.ids.contains(&900));
        assert_eq!(out.message_indices, vec![3; want.len()]);
        // "[" is template text, "a" content, "<X>" as text is content, "b", <Y> content, "]" template.
        assert_eq!(
            out.from_content,
            vec![false, true, true, true, true, true, true, false]
        );
    }

    #[test]
    fn a_break_cuts_the_run_like_a_sanitized_token_without_text() {
        // transformers' encode_marked_chat: a lone marker is dropped; the text after it is
        // encoded on its own with the newline trick, so "<X" + ">" never joins into <X>.
        let mut p = Pieces::new();
        p.set_message(Some(1));
        p.content("a<X");
        p.boundary();
        p.content(">b");
        let (out, calls) = run(&p, true, Tracking::default());
        assert_eq!(
            calls,
            vec![
                ("a<X".to_string(), true, true),
                ("\n>b".to_string(), true, true)
            ]
        );
        assert!(!out.ids.contains(&900));
        // Without sanitizing there is no marker, so no break either: one run.
        let (_, plain) = run(&p, false, Tracking::default());
        assert_eq!(plain.len(), 1);
    }

    #[test]
    fn newline_trick_falls_back_when_the_newline_merges() {
        let mut p = Pieces::new();
        p.content("<X>\nz");
        let (out, calls) = run(&p, true, Tracking::default());
        // "\n" + "\nz" merges into the "\n\n" id, so the fragment is encoded on its own.
        assert_eq!(
            calls,
            vec![
                ("\n<X>".to_string(), false, true),
                ("\n\nz".to_string(), true, true),
                ("\nz".to_string(), true, true),
            ]
        );
        let mut want = ids("<X>");
        want.extend(ids("\nz"));
        assert_eq!(out.ids, want);
    }

    #[test]
    fn runs_spanning_messages_get_per_token_indices() {
        let mut p = Pieces::new();
        p.set_message(Some(0));
        p.content("ab");
        p.set_message(Some(1));
        p.text("c");
        p.set_message(None);
        p.text("d");
        let tracking = Tracking {
            message_indices: true,
            from_content: false,
            body: false,
        };
        let (out, _) = run(&p, true, tracking);
        assert_eq!(out.message_indices, vec![0, 0, 1, -1]);
    }

    #[test]
    fn a_token_the_tokenizer_makes_from_plain_text_cannot_be_sanitized() {
        struct Stubborn;
        impl TextEncoder for Stubborn {
            fn encode(&self, _: &str, _: TextOptions, ids: &mut Vec<u32>) -> Result<()> {
                ids.push(900);
                Ok(())
            }
            fn encode_with_starts(
                &self,
                t: &str,
                o: TextOptions,
                ids: &mut Vec<u32>,
                s: &mut Vec<usize>,
            ) -> Result<()> {
                s.push(0);
                self.encode(t, o, ids)
            }
        }
        let control = ControlTokens::new(vec![("<X>".into(), 900)]);
        let encoder = PieceEncoder {
            text: &Stubborn,
            sanitizer: Some(&control),
            newline_ids: &[10],
        };
        let mut p = Pieces::new();
        p.set_message(Some(2));
        p.content("<X>");
        let err = encoder
            .encode(
                p.as_slice(),
                Tracking::default(),
                &mut EncodedChat::default(),
            )
            .unwrap_err();
        assert!(
            err.to_string().starts_with("message 2: cannot sanitize"),
            "{err}"
        );
    }
}
