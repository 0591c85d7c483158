//! The extension module's memory allocator: mimalloc, with the `python` feature only.
//!
//! The core allocates and frees many short-lived buffers per call (rendered prompts, piece lists,
//! converted messages, per-chunk ids). In a 20-step agent loop, glibc's `malloc` and `free`
//! took about a quarter of the time (`_int_malloc`, `unlink_chunk`, `_int_free` under perf).
//! With mimalloc, the same loop ran 1.3x as fast and one full encode 1.2x (paired runs of the
//! two builds, `benches/agent_loop.py`); `encode_batch` of the corpus ran about as fast as
//! before. The Rust crate used as a library keeps the allocator its user chooses: this file is
//! compiled into the Python extension only.
//!
//! Two defaults differ from mimalloc's, for memory: arenas are committed as they are used
//! instead of up front (`arena_eager_commit` 0), and memory freed is given back to the system
//! after 100 ms instead of a second (`purge_delay` 100). With mimalloc's own defaults, the first
//! `encode_batch` of a process peaked at 25 B per token beyond the ids (Llama 3.1, the corpus);
//! with these, 9.7 B, against 11 B with glibc's `malloc`. A `MIMALLOC_ARENA_EAGER_COMMIT` or
//! `MIMALLOC_PURGE_DELAY` environment variable still wins (`mi_option_set_default` leaves an
//! option the environment set).

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc v3's `mi_option_arena_eager_commit` (`mimalloc.h`; the crate is pinned to v3).
const ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
/// mimalloc v3's `mi_option_purge_delay`.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Set the module's allocator defaults; called once, when the module is imported.
pub fn configure() {
    // SAFETY: plain stores into mimalloc's option table, made while the module is being
    // imported (under the GIL, before any of the module's threads exist).
    unsafe {
        libmimalloc_sys::mi_option_set_default(ARENA_EAGER_COMMIT, 0);
        libmimalloc_sys::mi_option_set_default(PURGE_DELAY, 100);
    }
}
