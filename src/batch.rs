//! Parallel encoding of many conversations into one flat, columnar batch:
//! [`Encoder::encode_batch`] and [`Encoder::encode_batch_with`] live here, above the encoder.

use std::ops::{Deref, Range};
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
        self.encode_batch_with(conversations, options, &batch_options)
    }

    /// [`Encoder::encode_batch`] with training columns, truncation and error collection
    /// ([`BatchOptions`]). An `Err` conversation is one the caller found malformed.
    pub fn encode_batch_with<C: BatchItem>(
        &self,
        conversations: &[C],
        options: &EncodeOptions,
        batch_options: &BatchOptions,
    ) -> Result<Batch> {
        self.encode_batch_from(
            conversations.len(),
            |range| &conversations[range],
            options,
            batch_options,
        )
    }

    /// [`Encoder::encode_batch_with`] of `total` conversations that `window` gives a window at a
    /// time: `window(range)` is called for consecutive ranges, in order, on the calling thread,
    /// and returns exactly the conversations of that range (the offsets and the indices of
    /// errors count them); it is asked for the next window while the current one is encoded.
    /// A caller that converts its conversations into [`Message`]s can so convert them as they
    /// are needed instead of holding all of them converted (the Python binding does).
    ///
    /// # Panics
    /// If `window(range)` returns a slice whose length is not `range.len()`: the conversations
    /// would be numbered wrongly.
    pub fn encode_batch_from<C: BatchItem, W: Deref<Target = [C]>>(
        &self,
        total: usize,
        window: impl FnMut(Range<usize>) -> W,
        options: &EncodeOptions,
        batch_options: &BatchOptions,
    ) -> Result<Batch> {
        encode_windows(
            total,
            window,
            batch_options.num_threads,
            |chunk: &[C], first| encode_chunk(self, chunk, first, options, batch_options),
        )
    }

    /// Encode prompts rendered outside the core ([`Encoder::encode_rendered`]: the jinja2
    /// fallback's) in parallel, on chatids' own pool, into one flat batch, in the windows of
    /// [`Encoder::encode_batch`] (the ids are held once); the first error in order names its
    /// conversation.
    pub fn encode_rendered_batch(&self, texts: &[String], marked: bool) -> Result<Batch> {
        encode_windows(
            texts.len(),
            |range| &texts[range],
            None,
            |chunk, first| {
                let mut out = Chunk::default();
                for (j, text) in chunk.iter().enumerate() {
                    match self.encode_rendered(text, marked) {
                        Ok(ids) => out.ids.extend_from_slice(&ids),
                        Err(e) => {
                            out.failed = Some(in_conversation(e, first + j));
                            break;
                        }
                    }
                    out.ends.push(out.ids.len());
                }
                out
            },
        )
    }
}

/// Chunks per thread in a window: the window's buffers stay small beside the batch (about
/// a thousand conversations per thread), and a thread waits at the window's end for at most
/// one chunk of another.
const WINDOW_CHUNKS_PER_THREAD: usize = 64;

/// Encode `total` items (conversations, or rendered prompts), which `window` gives a window at
/// a time, in parallel on `num_threads` threads: `step(chunk, first)` encodes a chunk of
/// [`CHUNK`] items, the first of which is item `first` of the batch, and stops at its first
/// failure ([`Chunk::failed`]).
///
/// The threads encode a window's chunks, then the window is appended to the batch, so the ids
/// are held once (in the batch, whose spare capacity is never touched) plus one window's, not
/// twice, and a caller that converts conversations for `window` holds two windows of them
/// (the one being encoded, and the next, which it converts meanwhile).
fn encode_windows<T: Sync, W: Deref<Target = [T]>>(
    total: usize,
    mut window: impl FnMut(Range<usize>) -> W,
    num_threads: Option<usize>,
    step: impl Fn(&[T], usize) -> Chunk + Sync,
) -> Result<Batch> {
    let size = CHUNK * WINDOW_CHUNKS_PER_THREAD * pool_size(num_threads)?;
    let mut batch = Batch {
        offsets: Vec::with_capacity(total + 1),
        ..Default::default()
    };
    batch.offsets.push(0);
    let mut start = 0;
    let mut part = (total > 0).then(|| window(0..total.min(size)));
    while let Some(current) = part.take() {
        let end = total.min(start + size);
        let items: &[T] = &current;
        assert_eq!(
            items.len(),
            end - start,
            "encode_batch_from: window({start}..{end}) returned {} conversations",
            items.len()
        );
        let encode = || {
            install(num_threads, || {
                items
                    .par_chunks(CHUNK)
                    .enumerate()
                    .map(|(c, chunk)| step(chunk, start + c * CHUNK))
                    .collect::<Vec<Chunk>>()
            })
        };
        // The threads encode this window while this thread gets the next one (a caller that
        // converts conversations converts the next window meanwhile).
        let (encoded, next) = if end < total {
            std::thread::scope(|s| {
                let encoding = s.spawn(encode);
                let next = window(end..total.min(end + size));
                let encoded = encoding
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                (encoded, Some(next))
            })
        } else {
            (encode(), None)
        };
        let mut chunks = encoded?;
        drop(current);
        part = next;
        append(&mut batch, &mut chunks)?;
        if start == 0 && end < total {
            reserve_for_rest(&mut batch, end, total);
        }
        start = end;
    }
    shrink_without_copy(&mut batch.ids);
    shrink_without_copy(&mut batch.mask);
    Ok(batch)
}

/// Append a window's chunks to the batch, or return the first failure in conversation order,
/// whichever thread met it first.
fn append(batch: &mut Batch, chunks: &mut [Chunk]) -> Result<()> {
    if let Some(failed) = chunks.iter_mut().find_map(|c| c.failed.take()) {
        return Err(failed);
    }
    for chunk in chunks {
        let base = batch.ids.len();
        batch
            .offsets
            .extend(chunk.ends.iter().map(|&end| (base + end) as i64));
        batch.ids.extend_from_slice(&chunk.ids);
        batch.mask.extend_from_slice(&chunk.mask);
        batch.truncations.append(&mut chunk.truncations);
        batch.errors.append(&mut chunk.errors);
    }
    Ok(())
}

/// Bytes above which glibc's `malloc` always maps memory of its own (its largest mmap
/// threshold, 32 MiB), plus a page.
const MAPPED: usize = (32 << 20) + 4096;

/// After the first window (`done` of `total` conversations), reserve room for the whole batch:
/// three times the first window's tokens per conversation for every conversation, and at
/// least [`MAPPED`] bytes, so that the buffer is memory of its own. Growing it would copy the
/// ids at the batch's peak (old and new buffers both resident), and the first window
/// underestimates a corpus whose first conversations are shorter than the rest: the shared
/// corpus' first 2,048 average 204 Llama 3.1 tokens, all 10,159 of them 398, so room for a
/// quarter more than the estimate was outgrown and copied, about 3 B per token of the first
/// batch's peak. The room not used is never touched, so never resident (glibc maps the buffer
/// on its own; the Python extension's mimalloc, `src/python/allocator.rs`, commits arena memory
/// as it is touched), and at the end it is given back where that does not copy
/// ([`shrink_without_copy`]). If the address space refuses three times the estimate, the room
/// is the estimate and a quarter. (A corpus sorted by length can still outgrow it: then the
/// buffer grows by doubling, a copy each time.)
fn reserve_for_rest(batch: &mut Batch, done: usize, total: usize) {
    let per_conversation = batch.ids.len() as f64 / done.max(1) as f64;
    let room = |len: usize, size: usize, times: f64| {
        ((per_conversation * total as f64 * times) as usize)
            .max(MAPPED / size)
            .saturating_sub(len)
    };
    let (ids, mask) = (batch.ids.len(), batch.mask.len());
    if batch.ids.try_reserve_exact(room(ids, 4, 3.0)).is_err() {
        batch.ids.reserve_exact(room(ids, 4, 1.25));
    }
    if mask > 0 && batch.mask.try_reserve_exact(room(mask, 1, 3.0)).is_err() {
        batch.mask.reserve_exact(room(mask, 1, 1.25));
    }
}

/// Give back a buffer's unused room where that does not copy it: when at least half of it is
/// used, an allocator shrinks the block in place (glibc by `mremap`, mimalloc by keeping the
/// block). Less used room was never touched, so is not resident: it is kept rather than the
/// ids copied into a smaller block.
fn shrink_without_copy<T>(v: &mut Vec<T>) {
    if v.len() >= v.capacity() / 2 {
        v.shrink_to_fit();
    }
}

/// Encode one chunk of conversations, the first of which is conversation `first`.
fn encode_chunk<C: BatchItem>(
    encoder: &Encoder,
    chunk: &[C],
    first: usize,
    options: &EncodeOptions,
    batch_options: &BatchOptions,
) -> Chunk {
    let mut out = Chunk::default();
    for (j, conversation) in chunk.iter().enumerate() {
        let index = first + j;
        let encoded = conversation
            .messages()
            .map_err(|e| Error::Template(e.clone()))
            .and_then(|messages| {
                encode_for_training(encoder, messages, options, &batch_options.training)
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
            Err(e) => {
                out.failed = Some(in_conversation(e, index));
                break;
            }
        }
        out.ends.push(out.ids.len());
    }
    out
}

/// `error`, located in conversation `index` of the batch when it is a template error.
fn in_conversation(error: Error, index: usize) -> Error {
    match error {
        Error::Template(t) => Error::Template(t.in_conversation(index)),
        other => other,
    }
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
