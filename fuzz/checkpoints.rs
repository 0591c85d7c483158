//! The shared checkpoints every fuzz target runs on: `CHATIDS_MODELS_DIR` and the tokenizer
//! folders under it. Included by each target (`#[path]`), so it needs nothing from them.

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
