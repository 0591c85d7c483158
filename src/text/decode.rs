//! Token ids back to text, one id at a time: the tokenizer's own decoding, made incremental.
//!
//! [`TokenText`] holds each id's bytes, taken from `tokenizer.json` the way the `tokenizers`
//! crate's decoder reads them, and [`TextStream`] turns a stream of ids into text with O(1)
//! work per id, giving exactly `tokenizer.decode(ids, skip_special_tokens=False)` once
//! finished. Two decoder families are reproduced, which cover every shared checkpoint:
//!
//! * `ByteLevel` (Llama 3, Qwen, gpt-oss, DeepSeek V3, tekken): each character of a token is
//!   one byte through GPT-2's table ([`super::bytes_to_unicode`]); a token with a character
//!   outside the table (an added token such as `<|im_end|>` is all inside it) is its own UTF-8.
//!   The bytes of the whole sequence are then read as UTF-8, invalid sequences becoming U+FFFD
//!   as `String::from_utf8_lossy` does.
//! * SentencePiece-style `Sequence[Replace("▁", " "), ByteFallback, Fuse, Strip(" ", 1, 0)?]`
//!   (Llama 2, Mistral v1/v3/v7, Gemma): `▁` becomes a space, a token `<0xNN>` is byte NN (a
//!   run of such tokens that is not valid UTF-8 becomes one U+FFFD per byte, as `ByteFallback`
//!   does), and with `Strip` one leading space of the whole text is removed.
//!
//! Any other decoder is refused when the table is built, with its name.
//!
//! The mistral-common route's files have tables too, read the way mistral-common's `decode`
//! reads them: tekken ([`TokenText::from_tekken`]) as `ByteLevel` bytes, and a SentencePiece
//! model ([`TokenText::from_sentencepiece`]) as sentencepiece's own decoding (the first space
//! removed, `<unk>` as ` ⁇ `). Their special tokens, which mistral-common's `decode` leaves
//! out, are written as their text, each ending the run of text before it (mistral-common
//! decodes the text between special tokens in runs).

use tokenizers::Tokenizer;

/// How the bytes of consecutive ids combine into text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    /// `ByteLevel`: one lossy UTF-8 reading of all the bytes.
    ByteLevel,
    /// SentencePiece-style: strings, with runs of `<0xNN>` tokens read as UTF-8 per run.
    SentencePiece {
        /// `Strip(" ", 1, 0)`: the first space of the whole text is removed.
        strip_first_space: bool,
        /// How a run of byte tokens that is not valid UTF-8 is read: `tokenizers`'
        /// `ByteFallback` makes it one U+FFFD per byte; sentencepiece keeps each valid
        /// character of it and makes each other byte U+FFFD.
        lenient_runs: bool,
    },
}

/// What one id decodes to.
#[derive(Debug, Clone)]
enum Piece {
    /// Bytes (ByteLevel) or UTF-8 text (SentencePiece).
    Bytes(Box<[u8]>),
    /// A `<0xNN>` byte-fallback token (SentencePiece only).
    Byte(u8),
    /// A special token of a mistral-common file: its text, after the run of text before it is
    /// finished (it does not count as the start of the text for `Strip`).
    Special(Box<str>),
    /// sentencepiece's `<unk>`: its surface ` ⁇ `, never stripped.
    Unknown,
}

/// What sentencepiece writes for `<unk>` (its default `unk_surface`).
const UNK_SURFACE: &str = " \u{2047} ";

/// Every id's bytes, as the checkpoint's decoder reads them.
#[derive(Debug, Clone)]
pub struct TokenText {
    family: Family,
    pieces: Vec<Option<Piece>>,
}

impl TokenText {
    /// The table of `tokenizer`; an error names a decoder it does not reproduce.
    pub fn new(tokenizer: &Tokenizer) -> Result<Self, String> {
        let decoder = serde_json::to_value(tokenizer.get_decoder())
            .map_err(|e| format!("cannot read the tokenizer's decoder: {e}"))?;
        let family = family(&decoder)?;
        let size = tokenizer.get_vocab_size(true);
        let mut max_id = 0u32;
        let vocab = tokenizer.get_vocab(true);
        for &id in vocab.values() {
            max_id = max_id.max(id);
        }
        let mut pieces: Vec<Option<Piece>> = vec![None; size.max(max_id as usize + 1)];
        let table = super::bytes_to_unicode();
        let mut byte_of = std::collections::HashMap::with_capacity(256);
        for (b, c) in table.iter().enumerate() {
            byte_of.insert(*c, b as u8);
        }
        for (token, id) in vocab {
            let piece = match family {
                Family::ByteLevel => {
                    let bytes: Option<Vec<u8>> =
                        token.chars().map(|c| byte_of.get(&c).copied()).collect();
                    Piece::Bytes(
                        bytes
                            .unwrap_or_else(|| token.as_bytes().to_vec())
                            .into_boxed_slice(),
                    )
                }
                Family::SentencePiece { .. } => match fallback_byte(&token) {
                    Some(b) => Piece::Byte(b),
                    None => Piece::Bytes(
                        token
                            .replace('\u{2581}', " ")
                            .into_bytes()
                            .into_boxed_slice(),
                    ),
                },
            };
            pieces[id as usize] = Some(piece);
        }
        Ok(TokenText { family, pieces })
    }

    /// The table of a mistral-common `tekken.json`: each id's bytes (one lossy UTF-8 reading
    /// of a run, as tiktoken's `decode` with `errors="replace"`), special tokens as their text.
    pub fn from_tekken(tekken: &crate::text::tekken::Tekken) -> Self {
        let specials = tekken.special_tokens();
        let mut pieces: Vec<Option<Piece>> = specials
            .iter()
            .map(|t| Some(Piece::Special(t.as_str().into())))
            .collect();
        for (id, bytes) in tekken.token_bytes() {
            let id = id as usize;
            if pieces.len() <= id {
                pieces.resize(id + 1, None);
            }
            pieces[id] = Some(Piece::Bytes(bytes.into()));
        }
        TokenText {
            family: Family::ByteLevel,
            pieces,
        }
    }

    /// The table of a SentencePiece model as sentencepiece's `decode` reads it (mistral-common's
    /// SentencePiece files): `▁` is a space, `<0xNN>` a byte, `<unk>` ` ⁇ `, the first space
    /// removed when the model adds one when encoding; CONTROL pieces are written as their text.
    pub fn from_sentencepiece(sp: &crate::text::sentencepiece::SentencePieceBpe) -> Self {
        let pieces = (0..sp.vocab_size() as u32)
            .map(|id| {
                let text = sp.id_to_piece(id).unwrap_or_default();
                Some(if sp.is_control(id) {
                    Piece::Special(text.into())
                } else if id == sp.unk_id() {
                    Piece::Unknown
                } else if let Some(b) = fallback_byte(text).filter(|_| sp.is_byte(id)) {
                    Piece::Byte(b)
                } else {
                    Piece::Bytes(
                        text.replace('\u{2581}', " ")
                            .into_bytes()
                            .into_boxed_slice(),
                    )
                })
            })
            .collect();
        TokenText {
            family: Family::SentencePiece {
                strip_first_space: sp.strips_first_space(),
                lenient_runs: true,
            },
            pieces,
        }
    }

    /// Whether `id` is in the vocabulary.
    pub fn knows(&self, id: u32) -> bool {
        self.pieces.get(id as usize).is_some_and(Option::is_some)
    }

    /// The text of `ids` at once (what [`TextStream`] gives when fed them all).
    pub fn decode(&self, ids: &[u32]) -> Result<String, usize> {
        let mut stream = self.stream();
        let mut out = String::new();
        for (i, &id) in ids.iter().enumerate() {
            stream.push(id, &mut out).map_err(|_| i)?;
        }
        stream.finish(&mut out);
        Ok(out)
    }

    /// A decoder of ids fed one at a time.
    pub fn stream(&self) -> TextStream<'_> {
        TextStream {
            table: self,
            state: StreamState::default(),
        }
    }

    /// The text of `ids` that continue a sequence (a completion after its prompt): the
    /// decoder's `Strip` of the sequence's first space does not apply, since the space belongs
    /// to the text (SentencePiece adds its dummy prefix at the start of a sequence only).
    pub fn decode_continuation(&self, ids: &[u32]) -> Result<String, usize> {
        let mut state = StreamState::continuation();
        let mut out = String::new();
        for (i, &id) in ids.iter().enumerate() {
            state.push(self, id, &mut out).map_err(|_| i)?;
        }
        state.finish(self, &mut out);
        Ok(out)
    }
}

/// The decoder family of a `tokenizer.json` decoder (as JSON).
fn family(decoder: &serde_json::Value) -> Result<Family, String> {
    let kind = decoder
        .get("type")
        .and_then(|t| t.as_str())
        .unwrap_or("none");
    if kind == "ByteLevel" {
        return Ok(Family::ByteLevel);
    }
    if kind == "Sequence" {
        let steps: Vec<&serde_json::Value> = decoder
            .get("decoders")
            .and_then(|d| d.as_array())
            .map(|d| d.iter().collect())
            .unwrap_or_default();
        let names: Vec<&str> = steps
            .iter()
            .map(|s| s.get("type").and_then(|t| t.as_str()).unwrap_or(""))
            .collect();
        let replace_ok = steps.first().is_some_and(|s| {
            s.pointer("/pattern/String").and_then(|p| p.as_str()) == Some("\u{2581}")
                && s.get("content").and_then(|c| c.as_str()) == Some(" ")
        });
        let strip_ok = steps.get(3).is_none_or(|s| {
            s.get("content").and_then(|c| c.as_str()) == Some(" ")
                && s.get("start").and_then(|c| c.as_u64()) == Some(1)
                && s.get("stop").and_then(|c| c.as_u64()) == Some(0)
        });
        match names.as_slice() {
            ["Replace", "ByteFallback", "Fuse"] if replace_ok => {
                return Ok(Family::SentencePiece {
                    strip_first_space: false,
                    lenient_runs: false,
                })
            }
            ["Replace", "ByteFallback", "Fuse", "Strip"] if replace_ok && strip_ok => {
                return Ok(Family::SentencePiece {
                    strip_first_space: true,
                    lenient_runs: false,
                })
            }
            _ => {
                return Err(format!(
                    "decoder Sequence{names:?} is not one chatids reproduces"
                ))
            }
        }
    }
    Err(format!("decoder {kind:?} is not one chatids reproduces"))
}

/// `<0xNN>` -> NN.
fn fallback_byte(token: &str) -> Option<u8> {
    let hex = token.strip_prefix("<0x")?.strip_suffix('>')?;
    (hex.len() == 2)
        .then(|| u8::from_str_radix(hex, 16).ok())
        .flatten()
}

/// sentencepiece's reading of a byte run: each character that is valid UTF-8 as itself, each
/// other byte (a stray continuation byte, a sequence cut short, a surrogate) as U+FFFD.
fn per_character(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let len = match bytes[i] {
            0x00..=0x7F => 1,
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 0,
        };
        match bytes
            .get(i..i + len.max(1))
            .filter(|_| len > 0)
            .and_then(|c| std::str::from_utf8(c).ok())
        {
            Some(c) => {
                out.push_str(c);
                i += len;
            }
            None => {
                out.push('\u{FFFD}');
                i += 1;
            }
        }
    }
    out
}

/// Ids to text incrementally: [`TextStream::push`] appends the text each id completes.
#[derive(Debug, Clone)]
pub struct TextStream<'t> {
    table: &'t TokenText,
    state: StreamState,
}

impl TextStream<'_> {
    /// Decode `id`, appending the text it completes to `out`.
    pub fn push(&mut self, id: u32, out: &mut String) -> Result<(), UnknownId> {
        self.state.push(self.table, id, out)
    }

    /// Write what is still held back (an unfinished UTF-8 sequence becomes U+FFFD).
    pub fn finish(&mut self, out: &mut String) {
        self.state.finish(self.table, out)
    }
}

/// The state of a [`TextStream`] without its table, for owners that keep the table beside it
/// (a parser that outlives any borrow).
#[derive(Debug, Clone, Default)]
pub struct StreamState {
    /// Bytes not yet written: an unfinished UTF-8 sequence (ByteLevel) or a run of `<0xNN>`
    /// tokens (SentencePiece).
    pending: Vec<u8>,
    /// `pending` is a run of byte-fallback tokens.
    pending_bytes: bool,
    /// Some text was written (the `Strip` step removes a space only at the start).
    started: bool,
}

/// An id that is not in the vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnknownId(pub u32);

impl StreamState {
    /// The state for ids that continue a sequence (see [`TokenText::decode_continuation`]).
    pub fn continuation() -> Self {
        StreamState {
            started: true,
            ..Default::default()
        }
    }

    /// Decode `id` by `table`, appending the text it completes to `out`.
    pub fn push(&mut self, table: &TokenText, id: u32, out: &mut String) -> Result<(), UnknownId> {
        let piece = table
            .pieces
            .get(id as usize)
            .and_then(Option::as_ref)
            .ok_or(UnknownId(id))?;
        match (table.family, piece) {
            (Family::ByteLevel, Piece::Bytes(bytes)) => {
                // Most tokens are whole UTF-8 on their own: no buffering.
                if self.pending.is_empty() {
                    if let Ok(text) = std::str::from_utf8(bytes) {
                        self.write(table, text, out);
                        return Ok(());
                    }
                }
                self.pending.extend_from_slice(bytes);
                self.drain_utf8(table, out, false);
            }
            (Family::SentencePiece { .. }, Piece::Byte(b)) => {
                self.pending_bytes = true;
                self.pending.push(*b);
                // A complete, valid run can be written now only if nothing could extend it
                // into something else: a later byte token joins the run, so wait.
            }
            (Family::SentencePiece { .. }, Piece::Bytes(text)) => {
                self.flush_run(table, out);
                // Built from a `String`, so always UTF-8.
                let text = std::str::from_utf8(text).unwrap_or_default();
                self.write(table, text, out);
            }
            (_, Piece::Special(text)) => {
                self.finish(table, out);
                out.push_str(text);
            }
            (_, Piece::Unknown) => {
                self.finish(table, out);
                self.started = true;
                out.push_str(UNK_SURFACE);
            }
            (Family::ByteLevel, Piece::Byte(_)) => {
                unreachable!("byte pieces are SentencePiece only")
            }
        }
        Ok(())
    }

    /// Write what is still held back (an unfinished UTF-8 sequence becomes U+FFFD).
    pub fn finish(&mut self, table: &TokenText, out: &mut String) {
        match table.family {
            Family::ByteLevel => self.drain_utf8(table, out, true),
            Family::SentencePiece { .. } => self.flush_run(table, out),
        }
    }

    /// Whether some bytes are held back.
    pub fn holds_bytes(&self) -> bool {
        !self.pending.is_empty()
    }

    fn write(&mut self, table: &TokenText, text: &str, out: &mut String) {
        let mut text = text;
        if !self.started && !text.is_empty() {
            self.started = true;
            if let Family::SentencePiece {
                strip_first_space: true,
                ..
            } = table.family
            {
                text = text.strip_prefix(' ').unwrap_or(text);
            }
        }
        out.push_str(text);
    }

    /// SentencePiece: a finished run of byte tokens, as `ByteFallback` reads it.
    fn flush_run(&mut self, table: &TokenText, out: &mut String) {
        if !self.pending_bytes {
            return;
        }
        let run = std::mem::take(&mut self.pending);
        self.pending_bytes = false;
        let lenient = matches!(
            table.family,
            Family::SentencePiece {
                lenient_runs: true,
                ..
            }
        );
        if lenient {
            // sentencepiece removes the first space from a piece's `▁` only, never from bytes;
            // the bytes still start the text.
            let text = match String::from_utf8(run) {
                Ok(text) => text,
                Err(e) => per_character(e.as_bytes()),
            };
            self.started = true;
            out.push_str(&text);
            return;
        }
        match String::from_utf8(run) {
            Ok(text) => self.write(table, &text, out),
            Err(e) => {
                let n = e.as_bytes().len();
                self.write(table, &"\u{FFFD}".repeat(n), out);
            }
        }
    }

    /// ByteLevel: write the longest prefix that is UTF-8 or decided (each invalid sequence
    /// becomes one U+FFFD, as `from_utf8_lossy` makes it); keep an unfinished sequence at the
    /// end unless `all`.
    fn drain_utf8(&mut self, table: &TokenText, out: &mut String, all: bool) {
        let mut text = String::new();
        let mut start = 0;
        while start < self.pending.len() {
            match std::str::from_utf8(&self.pending[start..]) {
                Ok(valid) => {
                    text.push_str(valid);
                    start = self.pending.len();
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    text.push_str(
                        std::str::from_utf8(&self.pending[start..start + valid])
                            .unwrap_or_default(),
                    );
                    start += valid;
                    match e.error_len() {
                        Some(n) => {
                            text.push('\u{FFFD}');
                            start += n;
                        }
                        // An unfinished sequence at the end: the next id may complete it.
                        None if !all => break,
                        None => {
                            text.push('\u{FFFD}');
                            start = self.pending.len();
                        }
                    }
                }
            }
        }
        self.pending.drain(..start);
        self.write(table, &text, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lossy_stream(bytes: &[&[u8]]) -> String {
        // A ByteLevel table with one piece per byte string.
        let pieces = bytes
            .iter()
            .map(|b| Some(Piece::Bytes(b.to_vec().into_boxed_slice())))
            .collect();
        let table = TokenText {
            family: Family::ByteLevel,
            pieces,
        };
        let mut s = table.stream();
        let mut out = String::new();
        for i in 0..bytes.len() {
            s.push(i as u32, &mut out).unwrap();
        }
        s.finish(&mut out);
        out
    }

    #[test]
    fn byte_level_stream_equals_lossy_reading_of_all_bytes() {
        let cases: Vec<Vec<&[u8]>> = vec![
            vec![b"ab", "é".as_bytes()],
            vec![&[0xE2], &[0x82], &[0xAC]], // € split in three
            vec![&[0xE2, 0x82], b"x"],       // cut sequence, then ASCII
            vec![&[0xF0, 0x9F], &[0x98, 0x80], b"!"], // 😀 split
            vec![&[0xFF], b"a", &[0xC0, 0x80]], // invalid bytes
            vec![&[0xED, 0xA0], &[0x80]],    // a surrogate: invalid
            vec![&[0xF0, 0x9F, 0x98]],       // cut at the end
        ];
        for case in cases {
            let all: Vec<u8> = case.concat();
            assert_eq!(
                lossy_stream(&case),
                String::from_utf8_lossy(&all),
                "{case:?}"
            );
        }
    }

    #[test]
    fn sentencepiece_byte_runs_and_strip() {
        let pieces = vec![
            Some(Piece::Bytes(" Hello".as_bytes().into())),
            Some(Piece::Byte(0xE2)),
            Some(Piece::Byte(0x82)),
            Some(Piece::Byte(0xAC)),
            Some(Piece::Byte(0xFF)),
            Some(Piece::Bytes(" world".as_bytes().into())),
        ];
        let table = TokenText {
            family: Family::SentencePiece {
                strip_first_space: true,
                lenient_runs: false,
            },
            pieces,
        };
        assert_eq!(table.decode(&[0, 1, 2, 3, 5]).unwrap(), "Hello€ world");
        // An invalid run is one U+FFFD per byte (ByteFallback), not per sequence.
        assert_eq!(
            table.decode(&[0, 1, 2, 4, 5]).unwrap(),
            "Hello\u{FFFD}\u{FFFD}\u{FFFD} world"
        );
        assert_eq!(table.decode(&[5, 0]).unwrap(), "world Hello");
        assert_eq!(table.decode(&[9]), Err(0));
    }

    #[test]
    fn sentencepiece_reads_a_bad_run_per_character() {
        // sentencepiece's ProcessBytePieces: a valid character stays, each other byte is U+FFFD
        // (a cut `ê`-like lead EA 93, then `\n`, then a lone lead D4).
        assert_eq!(
            per_character(&[0x6F, 0xEA, 0x93, 0x0A, 0xD4]),
            "o\u{FFFD}\u{FFFD}\n\u{FFFD}"
        );
        assert_eq!(per_character("é€😀".as_bytes()), "é€😀");
        // A surrogate (ED A0 80) is three bad bytes.
        assert_eq!(per_character(&[0xED, 0xA0, 0x80]), "\u{FFFD}".repeat(3));
    }
}
