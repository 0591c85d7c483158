//! Parallel encoding of many conversations into one flat, columnar batch.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use rayon::prelude::*;

use crate::encoder::{EncodeOptions, Encoder};
use crate::encoding::{EncodedChat, Tracking};
use crate::error::{Error, Result};
use crate::message::Message;

/// Token ids of many conversations: conversation `i` is `ids[offsets[i]..offsets[i + 1]]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    /// All ids, conversation after conversation.
    pub ids: Vec<u32>,
    /// `len + 1` offsets into `ids`.
    pub offsets: Vec<i64>,
}

impl Batch {
    /// Number of conversations.
    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    /// Whether the batch holds no conversation.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The ids of conversation `i`.
    pub fn get(&self, i: usize) -> Option<&[u32]> {
        let (start, end) = (*self.offsets.get(i)?, *self.offsets.get(i + 1)?);
        Some(&self.ids[start as usize..end as usize])
    }
}

/// Conversations per parallel task: large enough to amortise scheduling, small enough to
/// balance uneven conversation lengths.
const CHUNK: usize = 16;

pub(crate) fn encode_batch(
    encoder: &Encoder,
    conversations: &[Vec<Message>],
    options: &EncodeOptions,
    num_threads: Option<usize>,
) -> Result<Batch> {
    let work = || -> Result<Vec<EncodedChatChunk>> {
        conversations
            .par_chunks(CHUNK)
            .enumerate()
            .map(|(chunk_index, chunk)| {
                let mut out = EncodedChatChunk::default();
                for (j, messages) in chunk.iter().enumerate() {
                    let mut chat = EncodedChat {
                        ids: std::mem::take(&mut out.ids),
                        ..Default::default()
                    };
                    encoder
                        .encode_into(messages, options, Tracking::default(), &mut chat)
                        .map_err(|e| match e {
                            Error::Template(t) => {
                                Error::Template(t.in_conversation(chunk_index * CHUNK + j))
                            }
                            other => other,
                        })?;
                    out.ids = chat.ids;
                    out.ends.push(out.ids.len());
                }
                Ok(out)
            })
            .collect()
    };
    let chunks = match num_threads {
        None => work()?,
        Some(n) => thread_pool(n)?.install(work)?,
    };
    let total: usize = chunks.iter().map(|c| c.ids.len()).sum();
    let mut batch = Batch {
        ids: Vec::with_capacity(total),
        offsets: Vec::with_capacity(conversations.len() + 1),
    };
    batch.offsets.push(0);
    for chunk in chunks {
        let base = batch.ids.len();
        batch
            .offsets
            .extend(chunk.ends.iter().map(|&end| (base + end) as i64));
        batch.ids.extend_from_slice(&chunk.ids);
    }
    Ok(batch)
}

#[derive(Default)]
struct EncodedChatChunk {
    ids: Vec<u32>,
    ends: Vec<usize>,
}

/// A rayon pool with `n` threads, built once per size and reused.
fn thread_pool(n: usize) -> Result<Arc<rayon::ThreadPool>> {
    static POOLS: OnceLock<Mutex<HashMap<usize, Arc<rayon::ThreadPool>>>> = OnceLock::new();
    if n == 0 {
        return Err(Error::Load("num_threads must be at least 1".into()));
    }
    let mut pools = POOLS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(pool) = pools.get(&n) {
        return Ok(pool.clone());
    }
    let pool = Arc::new(
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .thread_name(|i| format!("chatids-{i}"))
            .build()
            .map_err(|e| Error::Load(format!("cannot start {n} threads: {e}")))?,
    );
    pools.insert(n, pool.clone());
    Ok(pool)
}
