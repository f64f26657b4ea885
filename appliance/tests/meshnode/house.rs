//! The appliance's shell holds its shape (issue 57): `cli/` parses and prints, `daemon/`
//! starts and stops the subsystems, `http/` routes, and no other module of `appliance/src`
//! reaches into `cli/` or `http/`. Read from the source tree, so a new import fails here
//! before it grows a cycle.

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
    // reconcile.rs and the daemon's services hold the node's inference service, which lives
    // in http/inference until the typed serving layer leaves http/ (issue 57, step 3)
    let outside: Vec<String> = reaching_into("http", &[])
        .into_iter()
        .filter(|at| {
            let (file, line) = at.split_once(':').expect("file:line");
            let allowed = ["reconcile.rs", "daemon/services.rs"].contains(&file);
            !(allowed && line_names(file, line, "crate::http::inference::"))
        })
        .collect();
    assert_eq!(outside, Vec::<String>::new());
}

/// Whether line `line` of `appliance/src/{file}` names `what`.
fn line_names(file: &str, line: &str, what: &str) -> bool {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(file);
    let text = std::fs::read_to_string(path).expect("read a source file");
    let n: usize = line.parse().expect("a line number");
    text.lines().nth(n - 1).is_some_and(|l| l.contains(what))
}

#[test]
fn the_subsystems_start_in_the_daemon_not_in_the_router() {
    let http = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/http");
    let mut files = Vec::new();
    sources(&http, &mut files);
    let starts = [
        "Relay::start",
        "JobService::start",
        "Gatherer::start",
        "ProvingQueue::",
        "InferenceService::load",
        "control::bind",
        "mailbox::start",
        "desk::start",
        "peering::start",
        "federation::start",
        "Accounts::open",
        "open_books",
    ];
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read a source file");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for s in starts.iter().filter(|s| code.contains(**s)) {
                found.push(format!("{}:{}: {s}", file.display(), n + 1));
            }
        }
    }
    assert_eq!(found, Vec::<String>::new());
}
