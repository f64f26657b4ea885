//! A newcomer's first run: `meshnode up --demo` answers on every API with nothing
//! downloaded, the start-up says what to try next and prints no alarming errors, and
//! `meshnode job` works with a buyer identity it makes under the node home.

use super::*;
use fleetmesh_proto::NodeKeys;

#[test]
fn up_demo_answers_every_api_and_jobs_default_to_a_buyer_identity_under_the_home() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path().join("fleetmesh");
    let demo = std::path::PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    )
    .join("demo");
    let with_home = |args: &[&str]| {
        let mut c = meshnode();
        c.env("MESHNODE_HOME", &home).args(args);
        c
    };
    // the first job command makes the buyer identity, before there is any node
    let o = with_home(&[
        "job",
        "submit",
        demo.join("job.json").to_str().unwrap(),
        "--node",
        "http://127.0.0.1:9",
    ])
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let buyer_dir = home.join("buyer");
    assert!(
        stderr(&o).contains("made a buyer identity"),
        "{}",
        stderr(&o)
    );
    assert_eq!(mode(&buyer_dir), 0o700);
    assert_eq!(mode(&buyer_dir.join("nostr.sec")), 0o600);
    let buyer = NodeKeys::load(&buyer_dir).unwrap().nostr_pubkey_hex();

    // `up --demo` makes the node around it, on a box with no desktop session
    let mut cmd = with_home(&["up", "--demo", "--listen", "127.0.0.1:0"]);
    cmd.env_remove("XDG_RUNTIME_DIR")
        .env("MESHNODE_LOG", "info");
    let mut d = Daemon::start(cmd);
    let mut err = d.child.stderr.take().unwrap();
    let err_lines = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut err, &mut s).unwrap();
        s
    });
    assert!(home.join("meshnode.toml").exists() && buyer_dir.join("nostr.sec").exists());
    runtime().block_on(async {
        let http = http_client();
        let (status, r) = post_json(&http, &d.url("/v1/completions"),
            serde_json::json!({"model": "tiny", "prompt": "hello", "max_tokens": 4})).await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(r["usage"]["completion_tokens"], 4, "{r}");
        let input = serde_json::json!({"a": "3", "b": "11", "w": "5"});
        let (status, r) = post_json(&http, &d.url("/v1/proofs/prove"),
            serde_json::json!({"circuit": "demo", "input": input})).await;
        assert_eq!(status, 200, "{r}");
        // out = a·w² + b·(a < b) = 3·25 + 11
        assert_eq!(r["public"], serde_json::json!(["86", "3", "11"]), "{r}");
        let vk = std::fs::read_to_string(
            std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR")).join("../prover/tests/fixtures/circom/tiny_vk.json"),
        )
        .unwrap();
        let (status, v) = post_json(&http, &d.url("/v1/proofs/verify"), serde_json::json!({
            "vk": serde_json::from_str::<Value>(&vk).unwrap(), "proof": r["proof"], "public": r["public"]
        })).await;
        assert_eq!((status, &v["valid"]), (200, &serde_json::json!(true)), "{v}");
    });
    // the demo job, as the hint says, with the buyer identity made above
    let url = d.url("");
    let job_file = home.join("demo/job.json");
    let o = with_home(&["job", "submit", job_file.to_str().unwrap(), "--node", &url])
        .output()
        .unwrap();
    assert!(o.status.success(), "{} {}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains(&buyer), "which key: {}", stderr(&o));
    let sub: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    let id = sub["job"].as_str().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let o = with_home(&["job", "status", id, "--node", &url])
            .output()
            .unwrap();
        if o.status.code() != Some(3) {
            assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
            break;
        }
        assert!(Instant::now() < deadline, "the demo job did not finish");
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = tempfile::tempdir().unwrap();
    let o = with_home(&[
        "job",
        "result",
        id,
        "--out",
        out.path().to_str().unwrap(),
        "--node",
        &url,
    ])
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        std::fs::read_to_string(out.path().join("stdout")).unwrap(),
        std::fs::read_to_string(demo.join("input.txt"))
            .unwrap()
            .to_uppercase()
    );
    assert!(d.stop("-TERM").success());
    let err = err_lines.join().unwrap();
    assert!(err.contains("next, from another shell"), "{err}");
    assert!(
        err.contains("job submit") && err.contains("/v1/proofs/prove"),
        "{err}"
    );
    assert!(err.contains("hardware probe"), "the probe is logged: {err}");
    assert!(!err.contains("XDG_RUNTIME_DIR"), "{err}");
}

#[test]
fn up_on_an_address_others_reach_makes_the_node_with_an_api_token_only_its_owner_reads() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("node");
    let mut cmd = meshnode();
    cmd.args(["up", dir.to_str().unwrap(), "--listen", "0.0.0.0:0"]);
    let mut d = Daemon::start(cmd);
    let config = std::fs::read_to_string(dir.join("meshnode.toml")).unwrap();
    let token: String = config
        .lines()
        .find_map(|l| l.strip_prefix("token = \""))
        .map(|t| t.trim_end_matches('"').to_owned())
        .unwrap_or_else(|| panic!("no [api] token in\n{config}"));
    assert_eq!(token.len(), 64, "{token}");
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()), "{token}");
    assert_eq!(mode(&dir.join("meshnode.toml")), 0o600);
    // the APIs take the token, and refuse a request without it
    let port = d.addr.rsplit(':').next().unwrap().to_owned();
    let url = format!("http://127.0.0.1:{port}/v1/jobs");
    runtime().block_on(async {
        let http = http_client();
        let bare = http
            .post(&url)
            .header("content-type", "application/json")
            .body("{}");
        assert_eq!(bare.send().await.unwrap().status(), 401);
        let with = http
            .post(&url)
            .header("content-type", "application/json")
            .header("authorization", format!("Bearer {token}"))
            .body("{}");
        assert_eq!(with.send().await.unwrap().status(), 400);
    });
    let _ = d.child.kill();
    let _ = d.child.wait();
    let err = {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut d.child.stderr.take().unwrap(), &mut s).unwrap();
        s
    };
    assert!(
        err.contains("a token: one was generated into [api] token"),
        "{err}"
    );
    // the token is said once, by the start that made it, and kept in the file
    assert_eq!(err.matches(&token).count(), 1, "{err}");
    let mut cmd = meshnode();
    cmd.args(["up", dir.to_str().unwrap(), "--listen", "0.0.0.0:0"]);
    let mut again = Daemon::start(cmd);
    let _ = again.child.kill();
    let _ = again.child.wait();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut again.child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(
        !err.contains(&token),
        "a later start does not say it again: {err}"
    );
}
