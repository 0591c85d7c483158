//! Parallel encoding of many conversations into one flat, columnar batch:
//! [`Encoder::encode_batch`] and [`Encoder::encode_batch_with`] live here, above the encoder.

use std::sync::atomic::{AtomicPtr, Ordering};

use rayon::prelude::*;

use crate::encoder::{EncodeOptions, Encoder};
use crate::error::{Error, Result, TemplateError};
use crate::message::Message;
use crate::training::{encode_for_training, TrainingOptions, Truncated};

/// Token ids of many conversations: conversation `i` is `ids[offsets[i]..offsets[i + 1]]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    /// All ids, conversation after conversation.
    pub ids: Vec<u32>,
    /// `len + 1` offsets into `ids`.
    pub offsets: Vec<i64>,
    /// The loss mask aligned with `ids` (1: trained); empty unless asked for.
    pub mask: Vec<u8>,
    /// What the truncation policy cut, by conversation index.
    pub truncations: Vec<(usize, Truncated)>,
    /// Conversations rejected with [`OnError::Collect`] (they have no tokens), with the reason.
    pub errors: Vec<(usize, TemplateError)>,
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

/// What a batch does with a conversation that cannot be encoded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnError {
    /// Fail the whole batch with the first error (by conversation index).
    #[default]
    Raise,
    /// Give the conversation no tokens and record the error in [`Batch::errors`].
    Collect,
}

impl std::str::FromStr for OnError {
    type Err = TemplateError;

    /// `"raise"` or `"collect"`.
    fn from_str(name: &str) -> std::result::Result<Self, TemplateError> {
        match name {
            "raise" => Ok(OnError::Raise),
            "collect" => Ok(OnError::Collect),
            other => Err(TemplateError::whole(format!(
                "on_error must be \"raise\" or \"collect\", not {other:?}"
            ))),
        }
    }
}

/// Options of a batch besides the per-conversation [`EncodeOptions`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchOptions {
    /// Training columns and truncation.
    pub training: TrainingOptions,
    /// Raise or collect errors.
    pub on_error: OnError,
    /// Worker threads; `None`: `RAYON_NUM_THREADS`, else every core.
    pub num_threads: Option<usize>,
}

/// Conversations per parallel task: large enough to amortise scheduling, small enough to
/// balance uneven conversation lengths.
pub(crate) const CHUNK: usize = 16;

/// One conversation of a batch: its messages, or the error the caller found converting it.
pub trait BatchItem: Sync {
    /// The messages, or why the conversation is malformed.
    fn messages(&self) -> std::result::Result<&[Message], &TemplateError>;
}

impl BatchItem for Vec<Message> {
    fn messages(&self) -> std::result::Result<&[Message], &TemplateError> {
        Ok(self)
    }
}

impl BatchItem for std::result::Result<Vec<Message>, TemplateError> {
    fn messages(&self) -> std::result::Result<&[Message], &TemplateError> {
        self.as_deref()
    }
}

impl Encoder {
    /// Encode many conversations in parallel (rayon) into one flat batch of ids; the first
    /// conversation that cannot be encoded fails the batch. `num_threads`: `None` uses
    /// `RAYON_NUM_THREADS`, else every core.
    pub fn encode_batch(
        &self,
        conversations: &[Vec<Message>],
        options: &EncodeOptions,
        num_threads: Option<usize>,
    ) -> Result<Batch> {
        let batch_options = BatchOptions {
            num_threads,
            ..Default::default()
        };
        encode_batch(self, conversations, options, &batch_options)
    }

    /// [`Encoder::encode_batch`] with training columns, truncation and error collection
    /// ([`BatchOptions`]). An `Err` conversation is one the caller found malformed.
    pub fn encode_batch_with<C: BatchItem>(
        &self,
        conversations: &[C],
        options: &EncodeOptions,
        batch_options: &BatchOptions,
    ) -> Result<Batch> {
        encode_batch(self, conversations, options, batch_options)
    }

    /// Encode prompts rendered outside the core ([`Encoder::encode_rendered`]: the jinja2
    /// fallback's) in parallel, on chatids' own pool, into one flat batch.
    pub fn encode_rendered_batch(&self, texts: &[String], marked: bool) -> Result<Batch> {
        let encoded = install(None, || {
            texts
                .par_iter()
                .map(|t| self.encode_rendered(t, marked))
                .collect::<Result<Vec<_>>>()
        })??;
        let mut batch = Batch {
            ids: Vec::with_capacity(encoded.iter().map(Vec::len).sum()),
            offsets: Vec::with_capacity(encoded.len() + 1),
            ..Default::default()
        };
        batch.offsets.push(0);
        for ids in encoded {
            batch.ids.extend_from_slice(&ids);
            batch.offsets.push(batch.ids.len() as i64);
        }
        Ok(batch)
    }
}

/// Encode `conversations` in parallel; an `Err` item is a conversation the caller already
/// found malformed (it is raised or collected like any other error).
fn encode_batch<C: BatchItem>(
    encoder: &Encoder,
    conversations: &[C],
    options: &EncodeOptions,
    batch_options: &BatchOptions,
) -> Result<Batch> {
    let training = &batch_options.training;
    let work = || -> Vec<Chunk> {
        conversations
            .par_chunks(CHUNK)
            .enumerate()
            .map(|(chunk_index, chunk)| {
                let mut out = Chunk::default();
                for (j, conversation) in chunk.iter().enumerate() {
                    let index = chunk_index * CHUNK + j;
                    let encoded = conversation
                        .messages()
                        .map_err(|e| Error::Template(e.clone()))
                        .and_then(|messages| {
                            encode_for_training(encoder, messages, options, training)
                        });
                    match encoded {
                        Ok(chat) => {
                            out.ids.extend_from_slice(&chat.ids);
                            out.mask.extend_from_slice(&chat.mask);
                            if let Some(t) = chat.truncation {
                                out.truncations.push((index, t));
                            }
                        }
                        Err(Error::Template(t)) if batch_options.on_error == OnError::Collect => {
                            out.errors.push((index, t));
                        }
                        Err(Error::Template(t)) => {
                            out.failed = Some(Error::Template(t.in_conversation(index)));
                            break;
                        }
                        Err(other) => {
                            out.failed = Some(other);
                            break;
                        }
                    }
                    out.ends.push(out.ids.len());
                }
                out
            })
            .collect()
    };
    let mut chunks = install(batch_options.num_threads, work)?;
    // The first failure in conversation order, whichever thread met it first.
    if let Some(failed) = chunks.iter_mut().find_map(|c| c.failed.take()) {
        return Err(failed);
    }
    let total: usize = chunks.iter().map(|c| c.ids.len()).sum();
    let mut batch = Batch {
        ids: Vec::with_capacity(total),
        offsets: Vec::with_capacity(conversations.len() + 1),
        mask: Vec::with_capacity(if training.mask { total } else { 0 }),
        ..Default::default()
    };
    batch.offsets.push(0);
    for chunk in chunks {
        let base = batch.ids.len();
        batch
            .offsets
            .extend(chunk.ends.iter().map(|&end| (base + end) as i64));
        batch.ids.extend_from_slice(&chunk.ids);
        batch.mask.extend_from_slice(&chunk.mask);
        batch.truncations.extend(chunk.truncations);
        batch.errors.extend(chunk.errors);
    }
    Ok(batch)
}

/// The output of one parallel task.
#[derive(Default)]
struct Chunk {
    ids: Vec<u32>,
    mask: Vec<u8>,
    ends: Vec<usize>,
    truncations: Vec<(usize, Truncated)>,
    errors: Vec<(usize, TemplateError)>,
    /// The error that stopped this chunk ([`OnError::Raise`]).
    failed: Option<Error>,
}

/// Run `f` on a chatids thread pool of `num_threads` threads (else `RAYON_NUM_THREADS` when
/// set, else one per core), so that rayon's parallel iterators inside it run there.
///
/// chatids never uses rayon's global pool: in a child process after `fork()` (Python's
/// multiprocessing and data loaders fork) the global pool's threads do not exist, and the
/// first parallel call would wait for them forever. chatids' pools are per process (see
/// [`thread_pool`]), so a forked child builds its own.
pub fn install<R: Send>(num_threads: Option<usize>, f: impl FnOnce() -> R + Send) -> Result<R> {
    Ok(thread_pool(pool_size(num_threads)?)?.install(f))
}

/// The threads of the pool for `num_threads`: the number given, else `RAYON_NUM_THREADS`
/// (as rayon reads it: a positive integer, anything else is ignored), else the cores
/// available.
pub fn pool_size(num_threads: Option<usize>) -> Result<usize> {
    match num_threads {
        Some(0) => Err(Error::Load("num_threads must be at least 1".into())),
        Some(n) => Ok(n),
        None => Ok(std::env::var("RAYON_NUM_THREADS")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|&n| n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))),
    }
}

/// One pool in [`POOLS`].
struct PoolNode {
    /// The process that built it.
    pid: u32,
    threads: usize,
    pool: rayon::ThreadPool,
    next: *const PoolNode,
}

/// The pools built so far, newest first: an append-only list, never freed. No lock guards it,
/// so no lock can be held across a `fork()` (a forked child would wait for it forever); a
/// child skips the parent's pools (another process id) and builds its own. The parent's pools
/// are never dropped in the child (dropping one would signal threads that are not there).
static POOLS: AtomicPtr<PoolNode> = AtomicPtr::new(std::ptr::null_mut());

/// The pool of `pid` with `threads` threads in the list starting at `node`.
fn find_pool(
    mut node: *const PoolNode,
    pid: u32,
    threads: usize,
) -> Option<&'static rayon::ThreadPool> {
    // SAFETY: every node was leaked from a `Box` by `thread_pool` and is never freed or
    // changed once it is in the list.
    while let Some(n) = unsafe { node.as_ref() } {
        if n.pid == pid && n.threads == threads {
            return Some(&n.pool);
        }
        node = n.next;
    }
    None
}

/// This process's rayon pool with `n` threads (named `chatids-{i}`), built once per size.
fn thread_pool(n: usize) -> Result<&'static rayon::ThreadPool> {
    if n == 0 {
        return Err(Error::Load("num_threads must be at least 1".into()));
    }
    let pid = std::process::id();
    let mut head = POOLS.load(Ordering::Acquire);
    if let Some(pool) = find_pool(head, pid, n) {
        return Ok(pool);
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .thread_name(|i| format!("chatids-{i}"))
        .build()
        .map_err(|e| Error::Load(format!("cannot start {n} threads: {e}")))?;
    let node = Box::into_raw(Box::new(PoolNode {
        pid,
        threads: n,
        pool,
        next: head,
    }));
    loop {
        match POOLS.compare_exchange(head, node, Ordering::AcqRel, Ordering::Acquire) {
            // SAFETY: `node` is in the list now, and never freed.
            Ok(_) => return Ok(unsafe { &(*node).pool }),
            Err(current) => {
                // Another thread added a pool meanwhile: use it if it is the same one.
                if let Some(pool) = find_pool(current, pid, n) {
                    // SAFETY: `node` was never published; this thread owns it.
                    drop(unsafe { Box::from_raw(node) });
                    return Ok(pool);
                }
                // SAFETY: as above, `node` is still this thread's own.
                unsafe { (*node).next = current };
                head = current;
            }
        }
    }
}
