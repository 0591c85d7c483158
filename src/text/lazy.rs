//! The `tokenizers` crate's tokenizer, built only when something needs it.
//!
//! Building the crate's tokenizer from a `tokenizer.json` is most of what loading a large
//! vocabulary costs (Gemma 3: about a second), and an encoder whose native core runs needs it
//! only for texts the core hands back, for decoding, and for `Encoder.tokenizer_json()`. A
//! [`LazyTokenizer`] holds either the built tokenizer, or its JSON and a [`TokenIndex`] that
//! answers the two lookups loading makes (`token_to_id`, `id_to_token`) exactly as the crate
//! would, and builds the crate's tokenizer from the JSON on first use. Clones share one tokenizer.

use std::sync::{Arc, OnceLock};

use rustc_hash::FxHashMap;
use tokenizers::{Model, Tokenizer};

use super::image::{ReadResult, Reader, Writer};
use crate::error::{Error, Result};

/// A tokenizer, built now or on first use (see the module documentation).
#[derive(Clone)]
pub struct LazyTokenizer(Arc<Inner>);

struct Inner {
    built: OnceLock<std::result::Result<Tokenizer, String>>,
    /// The tokenizer's JSON compressed with zstd: given when the tokenizer is built on first
    /// use, else made the first time a state is written (and kept for the next ones).
    json: OnceLock<Vec<u8>>,
    /// Answers lookups while the tokenizer is not built: given with the JSON, else made the
    /// first time a state is written.
    index: OnceLock<TokenIndex>,
}

/// What answers a lookup: the built tokenizer, or the index while it is not built.
enum Lookup<'a> {
    Crate(&'a Tokenizer),
    Index(&'a TokenIndex),
    /// The tokenizer cannot be built (its error is raised where the tokenizer is needed).
    Unavailable,
}

impl LazyTokenizer {
    /// A tokenizer that is already built.
    pub fn built(tokenizer: Tokenizer) -> Self {
        let built = OnceLock::new();
        let _ = built.set(Ok(tokenizer));
        LazyTokenizer(Arc::new(Inner {
            built,
            json: OnceLock::new(),
            index: OnceLock::new(),
        }))
    }

    /// A tokenizer built on first use from `json` (its JSON compressed by
    /// [`LazyTokenizer::compressed_json`]); `index` answers lookups until then.
    pub fn from_compressed_json(json: Vec<u8>, index: TokenIndex) -> Self {
        LazyTokenizer(Arc::new(Inner {
            built: OnceLock::new(),
            json: OnceLock::from(json),
            index: OnceLock::from(index),
        }))
    }

    /// The tokenizer's JSON decompressed, when it is at hand.
    fn decompressed_json(&self) -> Option<std::result::Result<Vec<u8>, String>> {
        let json = self.0.json.get()?;
        Some(
            zstd::decode_all(json.as_slice())
                .map_err(|e| format!("cannot decompress its JSON: {e}")),
        )
    }

    /// The tokenizer, built now if it was not.
    pub fn get(&self) -> Result<&Tokenizer> {
        let built = self.0.built.get_or_init(|| {
            let json = self
                .decompressed_json()
                .unwrap_or_else(|| Err("it has no JSON".into()))?;
            Tokenizer::from_bytes(&json).map_err(|e| e.to_string())
        });
        built
            .as_ref()
            .map_err(|e| Error::Tokenizer(format!("cannot build the tokenizer: {e}")))
    }

    /// Whether the crate's tokenizer has been built.
    pub fn is_built(&self) -> bool {
        matches!(self.0.built.get(), Some(Ok(_)))
    }

    /// The built tokenizer if it is, else the index if there is one, else the tokenizer built
    /// now.
    fn lookup(&self) -> Lookup<'_> {
        if let Some(Ok(t)) = self.0.built.get() {
            return Lookup::Crate(t);
        }
        if let Some(index) = self.0.index.get() {
            return Lookup::Index(index);
        }
        self.get().map_or(Lookup::Unavailable, Lookup::Crate)
    }

    /// The id of a token's text (an added token's first), as the crate's `token_to_id`.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        match self.lookup() {
            Lookup::Crate(t) => t.token_to_id(token),
            Lookup::Index(index) => index.token_to_id(token),
            Lookup::Unavailable => None,
        }
    }

    /// The text of a token id (an added token's first), as the crate's `id_to_token`.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        match self.lookup() {
            Lookup::Crate(t) => t.id_to_token(id),
            Lookup::Index(index) => index.id_to_token(id).map(str::to_string),
            Lookup::Unavailable => None,
        }
    }

    /// The first id of `"x"` encoded with the post-processor (its BOS, when it adds one).
    pub fn first_id_with_specials(&self) -> Option<u32> {
        match self.lookup() {
            Lookup::Crate(t) => first_id_with_specials(t),
            Lookup::Index(index) => index.first_id_with_specials,
            Lookup::Unavailable => None,
        }
    }

    /// Write the lookup index of the tokenizer ([`TokenIndex`]): its own, or one made from the
    /// built tokenizer (and kept).
    pub fn write_index(&self, w: &mut Writer) -> Result<()> {
        if self.0.index.get().is_none() {
            let _ = self.0.index.set(TokenIndex::new(self.get()?));
        }
        if let Some(index) = self.0.index.get() {
            index.write(w);
        }
        Ok(())
    }

    /// The tokenizer serialized as JSON (the crate's `to_string`), without building it when
    /// its JSON is at hand.
    pub fn to_json(&self) -> Result<String> {
        if let Some(json) = self.decompressed_json() {
            return String::from_utf8(json.map_err(Error::Tokenizer)?)
                .map_err(|e| Error::Tokenizer(format!("its JSON is not UTF-8: {e}")));
        }
        self.get()?
            .to_string(false)
            .map_err(|e| Error::Tokenizer(format!("cannot serialize the tokenizer: {e}")))
    }

    /// [`LazyTokenizer::to_json`] compressed with zstd: the one the tokenizer was read with, or
    /// made now (and kept).
    pub fn compressed_json(&self) -> Result<&[u8]> {
        if self.0.json.get().is_none() {
            let packed = zstd::encode_all(self.to_json()?.as_bytes(), 3).map_err(|e| {
                Error::Tokenizer(format!("cannot compress the tokenizer's JSON: {e}"))
            })?;
            let _ = self.0.json.set(packed);
        }
        Ok(self.0.json.get().map(Vec::as_slice).unwrap_or_default())
    }
}

fn first_id_with_specials(tokenizer: &Tokenizer) -> Option<u32> {
    tokenizer
        .encode("x", true)
        .ok()
        .and_then(|e| e.get_ids().first().copied())
}

/// The vocabulary of a tokenizer as the crate's lookups see it: added tokens first, then the
/// model's vocabulary; laid out flat so that it loads without an allocation per token.
pub struct TokenIndex {
    added: FxHashMap<String, u32>,
    added_by_id: FxHashMap<u32, String>,
    /// The model's token texts, concatenated in id order.
    texts: Vec<u8>,
    /// Entry `i`: its text is `texts[starts[i]..starts[i + 1]]`, its id `ids[i]`.
    starts: Vec<u32>,
    ids: Vec<u32>,
    /// The entries sorted by text.
    by_text: Vec<u32>,
    /// Entry of each id (`u32::MAX`: none), for ids up to the largest.
    by_id: Vec<u32>,
    first_id_with_specials: Option<u32>,
}

impl TokenIndex {
    /// The index of a built tokenizer.
    pub fn new(tokenizer: &Tokenizer) -> Self {
        let added_by_id: FxHashMap<u32, String> = tokenizer
            .get_added_tokens_decoder()
            .into_iter()
            .map(|(id, t)| (id, t.content))
            .collect();
        // The crate maps each content to one id; take the same one it returns.
        let added = added_by_id
            .iter()
            .map(|(&id, content)| {
                (
                    content.clone(),
                    tokenizer.token_to_id(content).unwrap_or(id),
                )
            })
            .collect();
        let mut model: Vec<(String, u32)> = tokenizer.get_model().get_vocab().into_iter().collect();
        model.sort_unstable_by_key(|(_, id)| *id);
        let mut texts = Vec::new();
        let mut starts = vec![0u32];
        let mut ids = Vec::with_capacity(model.len());
        for (text, id) in &model {
            texts.extend_from_slice(text.as_bytes());
            starts.push(texts.len() as u32);
            ids.push(*id);
        }
        let text = |e: u32| &texts[starts[e as usize] as usize..starts[e as usize + 1] as usize];
        let mut by_text: Vec<u32> = (0..ids.len() as u32).collect();
        by_text.sort_unstable_by(|&a, &b| text(a).cmp(text(b)));
        Self::from_parts(
            added,
            added_by_id,
            (texts, starts, ids, by_text),
            first_id_with_specials(tokenizer),
        )
    }

    /// The index of its parts (`model`: texts, starts, ids, entries by text); the entry of each
    /// id is derived.
    fn from_parts(
        added: FxHashMap<String, u32>,
        added_by_id: FxHashMap<u32, String>,
        model: (Vec<u8>, Vec<u32>, Vec<u32>, Vec<u32>),
        first_id_with_specials: Option<u32>,
    ) -> Self {
        let (texts, starts, ids, by_text) = model;
        let max = ids.iter().copied().max().map_or(0, |m| m as usize + 1);
        let mut by_id = vec![u32::MAX; max];
        for (entry, &id) in ids.iter().enumerate() {
            by_id[id as usize] = entry as u32;
        }
        TokenIndex {
            added,
            added_by_id,
            texts,
            starts,
            ids,
            by_text,
            by_id,
            first_id_with_specials,
        }
    }

    fn text(&self, entry: u32) -> &[u8] {
        let e = entry as usize;
        &self.texts[self.starts[e] as usize..self.starts[e + 1] as usize]
    }

    fn token_to_id(&self, token: &str) -> Option<u32> {
        if let Some(&id) = self.added.get(token) {
            return Some(id);
        }
        let at = self
            .by_text
            .binary_search_by(|&e| self.text(e).cmp(token.as_bytes()))
            .ok()?;
        Some(self.ids[self.by_text[at] as usize])
    }

    fn id_to_token(&self, id: u32) -> Option<&str> {
        if let Some(t) = self.added_by_id.get(&id) {
            return Some(t);
        }
        let entry = *self.by_id.get(id as usize)?;
        if entry == u32::MAX {
            return None;
        }
        std::str::from_utf8(self.text(entry)).ok()
    }

    /// Write the index (see [`crate::text::image`]).
    pub fn write(&self, w: &mut Writer) {
        let mut added: Vec<(&String, u32)> = self.added.iter().map(|(t, &id)| (t, id)).collect();
        added.sort_unstable();
        w.len(added.len());
        for (t, id) in added {
            w.str(t);
            w.u32(id);
        }
        let mut by_id: Vec<(u32, &String)> =
            self.added_by_id.iter().map(|(&id, t)| (id, t)).collect();
        by_id.sort_unstable();
        w.len(by_id.len());
        for (id, t) in by_id {
            w.u32(id);
            w.str(t);
        }
        w.bytes(&self.texts);
        w.u32s(&self.starts);
        w.u32s(&self.ids);
        w.u32s(&self.by_text);
        w.option(self.first_id_with_specials, |w, id| w.u32(id));
    }

    /// Read an index [`TokenIndex::write`] wrote.
    pub fn read(r: &mut Reader<'_>) -> ReadResult<Self> {
        let n = r.len(12)?;
        let mut added = FxHashMap::default();
        for _ in 0..n {
            let t = r.str()?.to_string();
            added.insert(t, r.u32()?);
        }
        let n = r.len(12)?;
        let mut added_by_id = FxHashMap::default();
        for _ in 0..n {
            let id = r.u32()?;
            added_by_id.insert(id, r.str()?.to_string());
        }
        let texts = r.bytes()?.to_vec();
        let starts = r.u32s()?;
        let ids = r.u32s()?;
        let by_text = r.u32s()?;
        let first_id_with_specials = r.option(Reader::u32)?;
        let well_formed = starts.len() == ids.len() + 1
            && starts.first() == Some(&0)
            && starts.windows(2).all(|w| w[0] <= w[1])
            && starts.last().is_some_and(|&s| s as usize == texts.len())
            && by_text.len() == ids.len()
            && by_text.iter().all(|&e| (e as usize) < ids.len())
            && ids.iter().all(|&id| id < 1 << 28);
        if !well_formed {
            return Err("the token index has impossible offsets".into());
        }
        Ok(Self::from_parts(
            added,
            added_by_id,
            (texts, starts, ids, by_text),
            first_id_with_specials,
        ))
    }
}
