//! The shared checkpoints every fuzz target runs on: `CHATIDS_MODELS_DIR` and the tokenizer
//! folders under it, and (for the targets that take them) the mistral-common route's files
//! from `CHATIDS_MISTRAL_COMMON_DATA`. Included by each target (`#[path]`), so it needs nothing
//! from them.

use std::path::PathBuf;

/// `CHATIDS_MODELS_DIR`, when set.
pub fn models_dir() -> Option<String> {
    std::env::var("CHATIDS_MODELS_DIR")
        .ok()
        .filter(|d| !d.is_empty())
}

/// The folders under `dir` that hold a `tokenizer.json`, sorted by name (so an input always
/// picks the same checkpoint).
pub fn checkpoint_names(dir: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("CHATIDS_MODELS_DIR is a directory")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("tokenizer.json").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The mistral-common route's checkpoints, when `CHATIDS_MISTRAL_COMMON_DATA` names
/// mistral-common's `data` folder (the tokenizer files its package ships): one folder per file,
/// made under the temp dir with the file linked under the name the route reads
/// (`tokenizer.model.vN`, `tekken.json`), named `mistral-common:<file>`, sorted. (Targets
/// that encode through templates do not take them.)
#[allow(dead_code)]
pub fn mistral_common_checkpoints() -> Vec<(String, PathBuf)> {
    let Some(data) = std::env::var_os("CHATIDS_MISTRAL_COMMON_DATA").filter(|d| !d.is_empty())
    else {
        return Vec::new();
    };
    let data = PathBuf::from(data);
    let mut files: Vec<String> = std::fs::read_dir(&data)
        .expect("CHATIDS_MISTRAL_COMMON_DATA is a directory")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    // One folder of links for every run (the links are the same each time).
    let base = std::env::temp_dir().join("chatids-fuzz-mistral-common");
    let mut out = Vec::new();
    for file in files {
        let version = file.rsplit_once(".model.v").map(|(_, v)| v);
        let link = match version {
            Some(v) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => {
                format!("tokenizer.model.v{v}")
            }
            _ if file.starts_with("tekken") && file.ends_with(".json") => "tekken.json".to_string(),
            _ => continue,
        };
        let dir = base.join(&file);
        std::fs::create_dir_all(&dir).expect("a temp folder");
        let target = dir.join(&link);
        if !target.exists() {
            match std::os::unix::fs::symlink(data.join(&file), &target) {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                    panic!("cannot link {file} in {}: {e}", dir.display())
                }
                _ => {}
            }
        }
        out.push((format!("mistral-common:{file}"), dir));
    }
    out
}
