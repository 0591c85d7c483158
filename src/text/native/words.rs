//! Where a SentencePiece-style text (spaces already `▁`) may be cut into words.
//!
//! These tokenizers hand the BPE model a whole text as one word. A merge can only join two
//! symbols into a token of the vocabulary, so no merge ever crosses the boundary between a
//! character and a following `▁` unless some token holds such a pair (`x▁`). When the
//! vocabulary has none, merging the words between those boundaries one by one gives exactly
//! the ids of merging the whole text, and short words repeat, so they can be cached. When it
//! has some (Gemma 3 has `>▁</`), a boundary is kept whole wherever one of them occurs in the
//! text across it.

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};

use crate::text::image::{ReadResult, Reader, Writer};

/// `▁` (U+2581) in UTF-8.
pub const META: &[u8] = "\u{2581}".as_bytes();

/// Cuts texts into independently mergeable words.
pub struct WordCutter {
    /// The tokens holding a `▁` right after another character, if any.
    crossing: Option<AhoCorasick>,
    /// Their texts (kept to write the cutter into an image).
    crossing_texts: Vec<Vec<u8>>,
}

impl WordCutter {
    /// A cutter for a vocabulary; `None` if no cut is safe (some token that holds `x▁` is
    /// made of byte-fallback or unknown tokens, whose text is not the text they stand for).
    pub fn new<'a>(
        tokens: impl Iterator<Item = &'a [u8]>,
        opaque: impl Fn(&[u8]) -> bool,
    ) -> Option<Self> {
        let mut crossing: Vec<&[u8]> = Vec::new();
        for t in tokens {
            if crate::text::sentencepiece::has_space_after_other(t, META) {
                if opaque(t) {
                    return None;
                }
                crossing.push(t);
            }
        }
        Self::crossing(crossing.into_iter().map(<[u8]>::to_vec).collect())
    }

    /// A cutter that keeps boundaries whole where one of `texts` spans them.
    fn crossing(texts: Vec<Vec<u8>>) -> Option<Self> {
        let crossing = if texts.is_empty() {
            None
        } else {
            Some(
                AhoCorasickBuilder::new()
                    .match_kind(MatchKind::Standard)
                    .build(&texts)
                    .ok()?,
            )
        };
        Some(WordCutter {
            crossing,
            crossing_texts: texts,
        })
    }

    /// Write the cutter (its automaton is built again when read).
    pub fn write(&self, w: &mut Writer) {
        w.len(self.crossing_texts.len());
        for t in &self.crossing_texts {
            w.bytes(t);
        }
    }

    /// Read a cutter [`WordCutter::write`] wrote.
    pub fn read(r: &mut Reader<'_>) -> ReadResult<Self> {
        let n = r.len(8)?;
        let texts = (0..n)
            .map(|_| r.bytes().map(<[u8]>::to_vec))
            .collect::<ReadResult<Vec<_>>>()?;
        Self::crossing(texts).ok_or_else(|| "cannot build the word cutter".to_string())
    }

    /// Call `emit` with the byte ranges of the words of `text`, in order.
    #[inline]
    pub fn cut(&self, text: &[u8], emit: &mut impl FnMut(usize, usize)) {
        let blocked = match &self.crossing {
            Some(ac) if ac.is_match(text) => {
                let mut spans: Vec<(usize, usize)> = ac
                    .find_overlapping_iter(text)
                    .map(|m| (m.start(), m.end()))
                    .collect();
                spans.sort_unstable();
                Some(spans)
            }
            _ => None,
        };
        let is_blocked = |p: usize| {
            blocked
                .as_ref()
                .is_some_and(|spans| spans.iter().any(|&(a, b)| a < p && p < b))
        };
        // A word starts at each `▁` that follows another character (not at the text's start,
        // nor right after another `▁`). `▁`'s first byte is found by a byte search: it is a
        // lead byte, so it never matches inside another character.
        let mut start = 0;
        let mut meta_end = 0;
        let mut from = 0;
        while let Some(i) = super::find_byte(META[0], &text[from..]) {
            let pos = from + i;
            if text[pos..].starts_with(META) {
                if pos != meta_end && !is_blocked(pos) {
                    emit(start, pos);
                    start = pos;
                }
                meta_end = pos + META.len();
                from = meta_end;
            } else {
                from = pos + 1;
            }
        }
        if start < text.len() {
            emit(start, text.len());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(cutter: &WordCutter, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        cutter.cut(text.as_bytes(), &mut |a, b| {
            out.push(text[a..b].to_string())
        });
        out
    }

    #[test]
    fn cuts_before_each_run_of_meta_unless_a_token_spans_it() {
        let plain = WordCutter::new(["▁a", "▁▁"].iter().map(|s| s.as_bytes()), |_| false).unwrap();
        assert_eq!(words(&plain, "▁Hello▁▁world▁"), ["▁Hello", "▁▁world", "▁"]);
        assert_eq!(words(&plain, "ab"), ["ab"]);
        // Other characters with `▁`'s first byte (U+2580, U+2014) are not cuts.
        assert_eq!(words(&plain, "▀▁x—▁▁é▁"), ["▀", "▁x—", "▁▁é", "▁"]);
        assert_eq!(words(&plain, "▁▁"), ["▁▁"]);
        let gemma = WordCutter::new([">▁</"].iter().map(|s| s.as_bytes()), |_| false).unwrap();
        assert_eq!(words(&gemma, "▁<b>▁</b>▁x"), ["▁<b>▁</b>", "▁x"]);
        assert!(
            WordCutter::new(["<0x41>▁"].iter().map(|s| s.as_bytes()), |t| t
                .starts_with(b"<0x"))
            .is_none()
        );
    }
}
