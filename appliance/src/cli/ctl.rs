//! `meshnode apply` and `meshnode ctl`: clients of the running daemon's control socket
//! (`crate::daemon::control`), and how they print what a reconciliation did.

use crate::cli::{ApplyArgs, CtlCommand, Outcome};
use crate::{daemon, manifest, node};

/// `meshnode apply FILE…`: the manifests sent to the daemon, and what each did.
pub fn apply(args: ApplyArgs) -> anyhow::Result<Outcome> {
    let dir = node::dir_or_home(args.dir)?;
    let mut docs = Vec::new();
    for f in &args.files {
        docs.extend(manifest::read_documents(f)?);
    }
    let answer = daemon::control::request(
        &dir,
        &serde_json::json!({"cmd": "apply", "manifests": docs}),
    )?;
    if let Some(why) = answer["error"]["message"].as_str() {
        anyhow::bail!("nothing applied: {why}");
    }
    for a in answer["applied"].as_array().into_iter().flatten() {
        println!(
            "{}/{} {}: {}",
            a["kind"].as_str().unwrap_or("?"),
            a["name"].as_str().unwrap_or("?"),
            a["state"].as_str().unwrap_or("?"),
            a["effect"].as_str().unwrap_or("")
        );
        for path in a["changed"].as_array().into_iter().flatten() {
            println!("  changed {}", path.as_str().unwrap_or("?"));
        }
        for note in a["notes"].as_array().into_iter().flatten() {
            println!("  note: {}", note.as_str().unwrap_or("?"));
        }
    }
    print_reconciled(&answer["reconciled"], false);
    Ok(Outcome::Ok)
}

/// `meshnode ctl status|config|reload`.
pub fn ctl(cmd: CtlCommand) -> anyhow::Result<Outcome> {
    let (name, dir) = match cmd {
        CtlCommand::Status { dir } => ("status", dir),
        CtlCommand::Config { dir } => ("config", dir),
        CtlCommand::Reload { dir } => ("reload", dir),
    };
    let dir = node::dir_or_home(dir)?;
    let answer = daemon::control::ask(&dir, name)?;
    if name == "reload" {
        if let Some(why) = answer["error"]["message"].as_str() {
            anyhow::bail!("nothing reloaded: {why}");
        }
        print_reconciled(&answer["reconciled"], true);
    } else {
        println!("{}", serde_json::to_string_pretty(&answer)?);
    }
    Ok(Outcome::Ok)
}

/// What a reconciliation did, as `meshnode apply` and `meshnode ctl reload` print it
/// (`notes`: also the notes, which `apply` prints under each manifest).
fn print_reconciled(r: &serde_json::Value, notes: bool) {
    let list = |key: &str| -> Vec<String> {
        r[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|k| k.as_str().map(str::to_owned))
            .collect()
    };
    let (live, restart) = (list("live"), list("restart"));
    if live.is_empty() {
        println!("applied live: nothing changed");
    } else {
        println!("applied live: {}", live.join(", "));
    }
    for line in list("said") {
        println!("  {line}");
    }
    if !restart.is_empty() {
        println!("waits for a restart: {}", restart.join(", "));
    }
    if notes {
        for n in r["notes"].as_array().into_iter().flatten() {
            println!(
                "{}: {}",
                n["manifest"].as_str().unwrap_or("?"),
                n["note"].as_str().unwrap_or("?")
            );
        }
    }
}
