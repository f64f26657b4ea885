//! A torn evidence log: a node started on `ledger/evidence.jsonl` cut mid-line moves the
//! torn tail aside, goes on from the last whole line, and `meshnode ledger replay` names
//! the cut.

use super::*;

/// A node started on an evidence log whose last line is torn (a crash in the middle of a
/// write, a full disk) moves the torn tail aside into `evidence.torn-<time>`, says so (a
/// WARN, and a `repaired` line in the log) and goes on after its last whole line; `ledger
/// replay` then takes every line and names the cut, in words and as JSON.
#[test]
fn a_torn_evidence_log_is_repaired_at_start_and_replays_naming_the_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("n");
    assert!(init(&dir, &[]).status.success());
    // the first start writes the log's node line
    run_node(&dir).stop("-TERM");
    let log = dir.join("ledger").join("evidence.jsonl");
    let whole = std::fs::read(&log).unwrap();
    assert!(
        whole.ends_with(b"\n"),
        "{}",
        String::from_utf8_lossy(&whole)
    );
    // half a line, as a write cut short leaves it
    let torn = format!(
        r#"{{"type":"revoke","at":{},"peer":"{}"#,
        unix_now(),
        "ab".repeat(16)
    );
    let mut file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    std::io::Write::write_all(&mut file, torn.as_bytes()).unwrap();
    drop(file);

    let mut daemon = run_node(&dir);
    let mut logged = daemon.child.stderr.take().unwrap();
    assert!(daemon.stop("-TERM").success());
    let mut warned = String::new();
    std::io::Read::read_to_string(&mut logged, &mut warned).unwrap();
    let (offset, bytes) = (whole.len(), torn.len());
    assert!(
        warned.contains("moved aside")
            && warned.contains(&format!("offset={offset}"))
            && warned.contains(&format!("bytes={bytes}")),
        "{warned}"
    );
    // the torn bytes, exactly, beside the log; the log: its whole lines, then the repair
    let aside: Vec<PathBuf> = std::fs::read_dir(dir.join("ledger"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_str().unwrap();
            name.starts_with("evidence.torn-")
        })
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(std::fs::read_to_string(&aside[0]).unwrap(), torn);
    let name = aside[0].file_name().unwrap().to_str().unwrap().to_owned();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.as_bytes().starts_with(&whole));
    let repaired: Value = serde_json::from_str(text[offset..].trim_end()).unwrap();
    assert_eq!(repaired["type"], "repaired", "{text}");
    assert_eq!(
        (
            &repaired["offset"],
            &repaired["bytes"],
            &repaired["moved_to"]
        ),
        (
            &serde_json::json!(offset),
            &serde_json::json!(bytes),
            &serde_json::json!(name)
        )
    );

    let o = run(&["ledger", "replay", log.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&format!(
            "cut at byte {offset} at {}: a torn last line of {bytes} bytes moved to {name}",
            repaired["at"]
        )),
        "{}",
        stdout(&o)
    );
    let o = run(&["ledger", "replay", log.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let cut: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(cut["type"], "repaired");
    assert_eq!(
        (&cut["line"], &cut["offset"]),
        (&serde_json::json!(2), &repaired["offset"])
    );
    assert_eq!(
        (&cut["bytes"], &cut["moved_to"]),
        (&repaired["bytes"], &repaired["moved_to"])
    );
    // `ledger show` lists it too; a start on the repaired log cuts nothing more
    let o = run(&["ledger", "show", dir.to_str().unwrap(), "--json"]);
    let shown: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(shown["repairs"][0]["offset"], repaired["offset"], "{shown}");
    run_node(&dir).stop("-TERM");
    assert_eq!(std::fs::read_to_string(&log).unwrap(), text);
}
