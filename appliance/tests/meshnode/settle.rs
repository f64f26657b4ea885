//! `meshnode settle decode`: BOLT #11's own examples, decoded through the binary as the
//! spec breaks them down, and its invalid ones refused with exit 2 and the reason; and
//! invoices made and signed by npm `bolt11`, an independent implementation, from seeded
//! random fields, decoded to what it put in them.

use super::*;

fn vectors() -> Value {
    let text =
        std::fs::read_to_string(repo().join("appliance/settle/vectors/bolt11.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn settle_decode_prints_what_a_bolt11_invoice_asks_and_refuses_what_a_payer_must() {
    let v = vectors();
    for case in v["valid"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let o = run(&[
            "settle",
            "decode",
            case["invoice"].as_str().unwrap(),
            "--json",
        ]);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        let got: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
        for key in [
            "amount_msat",
            "payment_hash",
            "description",
            "description_hash",
        ] {
            assert_eq!(got[key], case[key], "{name}: {key}");
        }
        assert_eq!(got["payee"], v["signed_by"], "{name}");
        assert_eq!(got["route_hints"], case["route_hints"], "{name}");
        assert_eq!(got["fallbacks"], case["fallbacks"], "{name}");
    }
    // in words: the amount, the hash, the route, and a warning for the legacy form
    let pico = &v["valid"][9];
    let o = run(&["settle", "decode", pico["invoice"].as_str().unwrap()]);
    let out = stdout(&o);
    assert!(out.contains("967878534 msat"), "{out}");
    assert!(out.contains("channel 589390x3312x1"), "{out}");
    assert!(out.contains("warning: no payment secret"), "{out}");
    for case in v["invalid"].as_array().unwrap() {
        let o = run(&["settle", "decode", case["invoice"].as_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{}", case["why"]);
        let says = case["says"].as_str().unwrap();
        assert!(stderr(&o).contains(says), "{}: {}", case["why"], stderr(&o));
        assert!(stdout(&o).is_empty());
    }
}

#[test]
fn invoices_made_and_signed_by_npm_bolt11_decode_to_what_it_put_in_them() {
    let Some(npm) = node_tool("bolt11-js", "npm bolt11 interop") else {
        return;
    };
    let seed = unix_now().to_string();
    let script = repo().join("appliance/tests/meshnode/bolt11-js/make.mjs");
    let o = Command::new("node")
        .arg(script)
        .arg(&npm)
        .args(["40", &seed])
        .output()
        .unwrap();
    assert!(o.status.success(), "make.mjs: {}", stderr(&o));
    let payee = vectors()["signed_by"].clone();
    let made = stdout(&o);
    assert_eq!(made.lines().count(), 40);
    for line in made.lines() {
        let want: Value = serde_json::from_str(line).unwrap();
        let inv = want["invoice"].as_str().unwrap();
        let o = run(&["settle", "decode", inv, "--json"]);
        assert!(o.status.success(), "seed {seed}: {inv}: {}", stderr(&o));
        let got: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
        // every field it put in, under our name for it
        for (key, value) in want.as_object().unwrap() {
            if key != "invoice" {
                assert_eq!(&got[key], value, "seed {seed}: {key} of {inv}");
            }
        }
        assert_eq!(got["payee"], payee, "seed {seed}: {inv}");
        assert_eq!(got["network"], "bitcoin");
        assert!(got["warnings"].as_array().unwrap().is_empty(), "{got}");
    }
}
