//! The appliance's shell holds its shape (issue 57): `cli/` parses and prints, `http/`
//! routes, and no other module of `appliance/src` reaches into either. Read from the source
//! tree, so a new import fails here before it grows a cycle.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read appliance/src") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The `file:line` of each line of code (comments aside) outside `folder` and `main.rs`
/// that names `crate::{folder}`, except in the files of `allowed`.
fn reaching_into(folder: &str, allowed: &[&str]) -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let needle = format!("crate::{folder}::");
    let mut found = Vec::new();
    for file in files {
        let rel = file
            .strip_prefix(&src)
            .expect("under src")
            .to_string_lossy()
            .replace('\\', "/");
        if rel.starts_with(&format!("{folder}/")) || rel == "main.rs" || allowed.contains(&&*rel) {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read a source file");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            if code.contains(&needle) {
                found.push(format!("{rel}:{}", n + 1));
            }
        }
    }
    found
}

#[test]
fn no_module_outside_cli_imports_cli() {
    assert_eq!(reaching_into("cli", &[]), Vec::<String>::new());
}

#[test]
fn no_module_outside_http_imports_http_but_the_inference_service_it_still_owns() {
    // reconcile.rs holds the node's inference service, which lives in http/inference until
    // the typed serving layer leaves http/ (issue 57, step 3)
    assert_eq!(
        reaching_into("http", &["reconcile.rs"]),
        Vec::<String>::new()
    );
}
