//! The compiled encoder cache: an encoder's state ([`crate::persist`], uncompressed) written
//! to a cache folder the first time a checkpoint is loaded, and read instead of the
//! checkpoint's files the next times, in every process (a `datasets.map(num_proc=N)` worker, a
//! Ray task, a serving replica), in milliseconds.
//!
//! A cache file is named by a 128-bit hash of everything the encoder is built from: the
//! content of the checkpoint's tokenizer files (every `*.json`, `*.jinja`, `*.txt`,
//! `tokenizer.model*` file of the directory and its `additional_chat_templates/`), the
//! directory's path, the load options, the text encoder the environment asks for, the chatids
//! version and the state layout version. A changed file, option or chatids version gives
//! another name, so a stale file is never found, let alone trusted. A file that is found is
//! checked whole (its checksum, [`crate::text::image::checksum`]) before anything is read
//! from it; a damaged one is rebuilt and replaced, and [`CacheUse::Rebuilt`] says why. Files
//! are written to a temporary name and renamed, so a reader never sees half a file, and two
//! processes that build the same entry at once both write a complete one.
//!
//! GGUF files are not cached: hashing a multi-gigabyte file costs more than reading its
//! tokenizer.

use std::path::{Path, PathBuf};

use crate::encoder::{Encoder, LoadOptions, Route};
use crate::error::{Error, Result};
use crate::text::image::{checksum_reader, checksum_seeded};

/// What [`Encoder::load_cached`] did with the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheUse {
    /// The encoder was read from this file.
    Hit(PathBuf),
    /// The encoder was built from the checkpoint and written to this file.
    Written(PathBuf),
    /// The file was there but could not be read (the reason); the encoder was built from the
    /// checkpoint and the file replaced.
    Rebuilt(PathBuf, String),
    /// The encoder was built from the checkpoint; writing the file failed (the reason).
    NotWritten(PathBuf, String),
    /// The cache does not apply to this checkpoint (the reason); it was loaded as usual.
    NotCached(String),
}

impl std::fmt::Display for CacheUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CacheUse::Hit(p) => write!(f, "read from {}", p.display()),
            CacheUse::Written(p) => write!(f, "built, and written to {}", p.display()),
            CacheUse::Rebuilt(p, why) => {
                write!(f, "built again, and {} replaced ({why})", p.display())
            }
            CacheUse::NotWritten(p, why) => {
                write!(f, "built; {} could not be written ({why})", p.display())
            }
            CacheUse::NotCached(why) => write!(f, "not cached ({why})"),
        }
    }
}

/// The files of a checkpoint directory the cache key covers, sorted by name.
fn source_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let read = |d: &Path| -> Result<Vec<PathBuf>> {
        let entries = std::fs::read_dir(d)
            .map_err(|e| Error::Load(format!("cannot list {}: {e}", d.display())))?;
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let read_by_chatids = name.starts_with("tokenizer.model")
                || [".json", ".jinja", ".txt"]
                    .iter()
                    .any(|e| name.ends_with(e));
            if read_by_chatids && path.is_file() {
                out.push(path);
            }
        }
        Ok(out)
    };
    let mut files = read(dir)?;
    let extra = dir.join("additional_chat_templates");
    if extra.is_dir() {
        files.extend(read(&extra)?);
    }
    files.sort();
    Ok(files)
}

/// The cache key of loading `dir` with `options`: 32 hex digits.
fn cache_key(dir: &Path, options: &LoadOptions<'_>) -> Result<String> {
    let mut summary = Vec::new();
    let mut line = |parts: &[&[u8]]| {
        for p in parts {
            summary.extend_from_slice(&(p.len() as u64).to_le_bytes());
            summary.extend_from_slice(p);
        }
    };
    let canonical = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    line(&[
        env!("CARGO_PKG_VERSION").as_bytes(),
        &[crate::persist::STATE_VERSION],
        canonical.to_string_lossy().as_bytes(),
        options.format.unwrap_or("\0").as_bytes(),
        match options.reference {
            None => b"",
            Some(Route::Transformers) => b"transformers",
            Some(Route::MistralCommon) => b"mistral-common",
        },
        options.chat_template.unwrap_or("\0").as_bytes(),
        &[u8::from(options.allow_external)],
        format!("{:?}", options.unknown_template_args).as_bytes(),
        format!("{:?}", crate::text::EncoderChoice::from_env()).as_bytes(),
    ]);
    for file in source_files(dir)? {
        let sum = std::fs::File::open(&file)
            .and_then(|f| checksum_reader(f, 1))
            .map_err(|e| Error::Load(format!("cannot read {}: {e}", file.display())))?;
        let name = file.strip_prefix(dir).unwrap_or(&file);
        line(&[name.to_string_lossy().as_bytes(), &sum.to_le_bytes()]);
    }
    Ok(format!(
        "{:016x}{:016x}",
        checksum_seeded(&summary, 1),
        checksum_seeded(&summary, 2)
    ))
}

/// Write `bytes` to `path` through a temporary file in the same folder, renamed into place.
/// The temporary name is unique to the process and the call, so that two writers (processes or
/// threads) never share one.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.{}-{}.tmp",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id(),
        WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::write(&tmp, bytes)
        .and_then(|()| std::fs::rename(&tmp, path))
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
}

impl Encoder {
    /// [`Encoder::load_with`] through the compiled cache in `cache_dir` (see
    /// [`crate::compiled`]): read from it when it holds this checkpoint with these options,
    /// else loaded from the checkpoint and written to it. The cache never changes the
    /// result; a failure to write it is reported, not raised.
    pub fn load_cached(
        path: impl AsRef<Path>,
        options: &LoadOptions<'_>,
        cache_dir: impl AsRef<Path>,
    ) -> Result<(Encoder, CacheUse)> {
        let path = path.as_ref();
        if !path.is_dir() {
            let encoder = Encoder::load_with(path, options)?;
            return Ok((
                encoder,
                CacheUse::NotCached("only checkpoint directories are cached, not files".into()),
            ));
        }
        let file = cache_dir
            .as_ref()
            .join(format!("{}.chatids", cache_key(path, options)?));
        let mut damaged = None;
        match std::fs::read(&file) {
            Ok(bytes) => match Encoder::from_bytes(&bytes) {
                Ok(encoder) => return Ok((encoder, CacheUse::Hit(file))),
                Err(e) => damaged = Some(e.to_string()),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => damaged = Some(format!("cannot read it: {e}")),
        }
        let encoder = Encoder::load_with(path, options)?;
        let written = encoder.to_state(false).and_then(|state| {
            write_atomically(&file, &state).map_err(|e| Error::Load(e.to_string()))
        });
        let used = match (written, damaged) {
            (Err(e), _) => CacheUse::NotWritten(file, e.to_string()),
            (Ok(()), Some(why)) => CacheUse::Rebuilt(file, why),
            (Ok(()), None) => CacheUse::Written(file),
        };
        Ok((encoder, used))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_follows_every_source_file_and_option() {
        let dir = std::env::temp_dir().join(format!("chatids-compiled-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("additional_chat_templates")).unwrap();
        std::fs::write(dir.join("tokenizer_config.json"), "{}").unwrap();
        std::fs::write(dir.join("model.safetensors"), "weights").unwrap();
        let options = LoadOptions::default();
        let base = cache_key(&dir, &options).unwrap();
        assert_eq!(base.len(), 32);
        assert_eq!(cache_key(&dir, &options).unwrap(), base);
        // Weights are not hashed; tokenizer files and templates are.
        std::fs::write(dir.join("model.safetensors"), "other weights").unwrap();
        assert_eq!(cache_key(&dir, &options).unwrap(), base);
        std::fs::write(dir.join("tokenizer_config.json"), "{ }").unwrap();
        let changed = cache_key(&dir, &options).unwrap();
        assert_ne!(changed, base);
        std::fs::write(dir.join("additional_chat_templates/tool_use.jinja"), "x").unwrap();
        assert_ne!(cache_key(&dir, &options).unwrap(), changed);
        let jinja = LoadOptions {
            format: Some("jinja"),
            ..LoadOptions::default()
        };
        assert_ne!(
            cache_key(&dir, &jinja).unwrap(),
            cache_key(&dir, &options).unwrap()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
