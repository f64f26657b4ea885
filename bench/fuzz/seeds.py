#!/usr/bin/env python3
"""Writes the seed corpora under bench/fuzz/corpus/ from the repository's own fixtures and
a few hand-made inputs (Python's standard library only):

    python3 bench/fuzz/seeds.py

The model, tokenizer and negentropy seeds come from Rust instead:
`cargo test -p fleetmesh-fuzz --test corpus -- --ignored write_generated_seeds`.
Files other fuzz runs added (`bench/fuzz.sh --keep` merges, crash reproducers named
`crash-*`) are left alone; only the files named here are (re)written.
"""
import base64
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
CORPUS = os.path.join(HERE, "corpus")


def read(path):
    with open(os.path.join(ROOT, path), "rb") as f:
        return f.read()


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def js(v):
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


# ---- relay ----
vectors = json.loads(read("relay/tests/vectors/nip01-event-id.vectors.json"))["vectors"]
events = []
for i, v in enumerate(vectors[:6]):
    ev = {
        "id": v.get("id", "00" * 32),
        "pubkey": v["pubkey"],
        "created_at": v["created_at"],
        "kind": v["kind"],
        "tags": v["tags"],
        "content": v["content"],
        "sig": "00" * 64,
    }
    events.append(ev)
    put("relay_event", f"nip01_{i}.json", js(ev))
for kind in ["30810", "30811", "11801", "11802", "30801", "30802", "30803", "21801", "30385", "30166", "30812"]:
    ev = json.loads(read(f"schemas/examples/events/kind-{kind}.json"))["valid"][0]
    put("relay_event", f"kind_{kind}.json", js(ev))
    events.append(ev)
put("relay_event", "expiring.json", js(dict(events[0], tags=[["expiration", "1"], ["d", ""]])))

filters = {
    "empty.json": {},
    "ids.json": {"ids": ["ab" * 32], "limit": 1},
    "everything.json": {
        "authors": ["dff1d77f2a671c5f36183726db2341be58feae1da2deced843240f7b502ba659"],
        "kinds": [1, 30810, 65535],
        "#e": ["ab" * 32],
        "#t": ["fleetmesh"],
        "since": 1700000000,
        "until": 1800000000,
        "limit": 500,
    },
    "empty_lists.json": {"ids": [], "#d": []},
    "search.json": {"search": "x"},
}
for name, f in filters.items():
    put("relay_filter", name, js(f))

put("relay_message", "event.json", js(["EVENT", events[0]]))
put("relay_message", "event_kind_30810.json", js(["EVENT", events[6]]))
put("relay_message", "req.json", js(["REQ", "sub1", filters["everything.json"], {"kinds": [1]}]))
put("relay_message", "close.json", js(["CLOSE", "sub1"]))
put("relay_message", "neg_open.json", js(["NEG-OPEN", "n1", {"kinds": [1]}, "6100000200"]))
put("relay_message", "neg_msg.json", js(["NEG-MSG", "n1", "61"]))
put("relay_message", "neg_close.json", js(["NEG-CLOSE", "n1"]))
put("relay_message", "unknown.json", js(["AUTH", {}]))

nip44 = json.loads(read("relay/tests/vectors/nip44.vectors.json"))["v2"]
for i, v in enumerate(nip44["valid"]["encrypt_decrypt"][:3]):
    put("relay_nip44", f"payload_{i}", b"\x00" + v["payload"].encode())
for i, v in enumerate(nip44["invalid"]["decrypt"][:4]):
    put("relay_nip44", f"invalid_{i}", b"\x00" + v["payload"].encode())
put("relay_nip44", "padded_hello", b"\x01" + b"\x00\x05hello" + b"\x00" * 27)
put("relay_nip44", "padded_33", b"\x01" + b"\x00\x21" + b"x" * 33 + b"\x00" * 31)

# the gift-wrap harness: 0 a wrap event, 1 a seal, 2 a rumor, 3 a rumor's content
put("relay_giftwrap", "wrap_event.json", b"\x00" + js(dict(events[0], kind=1059)).encode())
put("relay_giftwrap", "seal_event.json", b"\x01" + js(dict(events[0], kind=13, tags=[])).encode())
rumor = {"id": "00" * 32, "pubkey": "11" * 32, "created_at": 1767225600, "kind": 14, "tags": [], "content": "hi"}
put("relay_giftwrap", "rumor.json", b"\x02" + js(rumor).encode())
put("relay_giftwrap", "rumor_signed.json", b"\x02" + js(dict(rumor, sig="00" * 64)).encode())
put("relay_giftwrap", "content.txt", b"\x03compute/1.0 \xe2\x9c\x93")
# DIDComm: the wire shapes of PyPI didcomm 0.3.2 (JWE and JWS headers), a body, a tamper
didcomm_jwe = {
    "protected": base64.urlsafe_b64encode(js({
        "typ": "application/didcomm-encrypted+json", "alg": "ECDH-1PU+A256KW",
        "enc": "A256CBC-HS512", "apu": "ZGlk", "apv": "AAAA", "skid": "did",
        "epk": {"crv": "X25519", "x": "9YjkjeuK9Szex8Ky-PDA0tLliXIhXAdJgiMvpGYiRRk", "kty": "OKP"},
    }).encode()).decode().rstrip("="),
    "recipients": [{"header": {"kid": "did:nostr:" + "ab" * 32 + "#x25519"},
                    "encrypted_key": "h06qvmHFZ1wXX9C6Gp2U7eygl5H3yrwoW0EnEUw-07tWjqPi4RcTgw"}],
    "iv": "klAq88Jm4Tw_xHfeILWoLaSEK13XMbj5", "ciphertext": "A1Q8tve8", "tag": "PwcEUIMrTgITGJaZJQwTBA",
}
put("relay_didcomm", "jwe.json", b"\x00" + js(didcomm_jwe).encode())
didcomm_jws = {"payload": "eyJpZCI6IngifQ", "signatures": [{
    "protected": "eyJ0eXAiOiJhcHBsaWNhdGlvbi9kaWRjb21tLXNpZ25lZCtqc29uIiwiYWxnIjoiRWREU0EifQ",
    "signature": "n8mrnxTliAc3tCi3PIhaiVOU8Bzj41bIXA_c35LxgLbqqCbUg1UE6o2pCGZ4bKapqA9caIJ10YdKMIpjm0RUBQ",
    "header": {"kid": "did:nostr:" + "ab" * 32 + "#ed25519"}}]}
put("relay_didcomm", "jws.json", b"\x00" + js(didcomm_jws).encode())
put("relay_didcomm", "plain.json", b"\x00" + js({"id": "1", "type": "t", "body": {}, "typ": "application/didcomm-plain+json"}).encode())
put("relay_didcomm", "body.txt", b"\x01compute/1.0 \xe2\x9c\x93")
put("relay_didcomm", "tamper.bin", b"\x02\x01\x10\x01")

# ---- ledger: scripts of operations the harness turns into signed, well-formed lines ----
def n(v):
    """A script number, 8 bytes wide."""
    return bytes([3]) + int(v).to_bytes(8, "little")


def grant(ours, events, nbytes, secs, initial, low, inc):
    return bytes([0 if ours else 1]) + n(0) + n(events) + n(nbytes) + n(secs) + n(initial) + n(low) + n(inc)


def receipt(honest, window, secs, sent, received, seq=0):
    head = bytes([2]) + n(1) + bytes([1 if honest else 0]) + n(window) + n(secs)
    return head + (b"" if honest else n(seq)) + n(sent[0]) + n(sent[1]) + n(received[0]) + n(received[1])


def measure(window, secs, e_in, b_in, e_out, b_out, bad=(0, 0, 0)):
    return bytes([3]) + n(2) + n(window) + n(secs) + b"".join(n(v) for v in (e_in, b_in, e_out, b_out) + bad)


grants = grant(True, 10, 40960, 4, 10, 2, 1) + grant(False, 10, 40960, 4, 10, 2, 1)
put("ledger_evidence", "clean.bin", b"!" + grants + receipt(True, 5, 4, (3, 300), (2, 200)) + measure(5, 4, 3, 300, 2, 200))
put("ledger_evidence", "flood.bin", b"!" + grants + b"".join(
    receipt(True, w, 4, (60, 6000), (0, 0)) + measure(w, 4, 60, 6000, 0, 0) for w in range(1, 6)))
put("ledger_evidence", "misreport.bin", b"!" + grants + receipt(True, 7, 4, (10, 100), (0, 0)) + measure(7, 4, 90, 9000, 0, 0))
put("ledger_evidence", "fork.bin", b"!" + grants + receipt(True, 1, 4, (1, 1), (1, 1)) + receipt(False, 2, 4, (1, 1), (1, 1), seq=0))
put("ledger_evidence", "huge.bin", b"!" + grant(True, 2**64 - 1, 2**64 - 1, 2**64 - 1, 2**64 - 1, 2**64 - 1, 2**64 - 1)
    + receipt(True, 2**64 - 1, 2**64 - 1, (2**64 - 1, 2**64 - 1), (2**64 - 1, 2**64 - 1))
    + measure(2**64 - 1, 2**64 - 1, 2**64 - 1, 2**64 - 1, 2**64 - 1, 2**64 - 1, (1, 1, 1)))
put("ledger_evidence", "log.jsonl", "\n".join([
    js({"type": "node", "at": 1, "pubkey": "ab" * 32}),
    js({"type": "measure", "at": 2, "peer": "cd" * 32, "window": 1, "window_secs": 4,
        "counts": {"events_in": 1, "bytes_in": 1, "events_out": 0, "bytes_out": 0,
                   "out_of_filter": 0, "malformed": 0, "forged": 0}}),
    js({"type": "receipt", "at": 3, "peer": "cd" * 32, "receipt": {"type": "receipt"}}),
    js({"type": "revoke", "at": 4, "peer": "cd" * 32}),
    "{\"type\":\"measure\",\"at\":",
]) + "\n")

# ---- prover ----
fx = "prover/tests/fixtures/circom/"
vk, proof, public = (json.loads(read(fx + f)) for f in ["tiny_vk.json", "tiny_proof.json", "tiny_public.json"])
put("prover_snarkjs", "tiny_vk.json", read(fx + "tiny_vk.json"))
put("prover_snarkjs", "tiny_proof.json", read(fx + "tiny_proof.json"))
put("prover_snarkjs", "tiny_public.json", read(fx + "tiny_public.json"))
put("prover_snarkjs", "tiny_all.json", js({"vk": vk, "proof": proof, "public": public}))
for bad in ["infinity_a", "off_curve_b", "wrong_subgroup_b", "noncanonical_a"]:
    put("prover_snarkjs", f"invalid_{bad}.json", read(fx + f"invalid/{bad}/proof.json"))
put("prover_zkey", "tiny.zkey", read(fx + "tiny.zkey"))
put("prover_r1cs", "tiny.r1cs", read(fx + "tiny.r1cs"))
put("prover_wtns", "tiny.wtns", read(fx + "tiny.wtns"))

# ---- tee ----
tee = "inference/attest/tests/vectors/tee/"
put("tee_snp", "attestation.bin", read(tee + "sev-snp/go-sev-guest/attestation.bin"))
put("tee_snp", "report_milan.hex", read(tee + "sev-snp/virtee-sev/report_milan.hex"))
guids = {
    "vcek": bytes.fromhex("63da758de6644564adc5f4b93be8accd"),
    "ask": bytes.fromhex("4ab7b379bbac4fe4a02f05aef327c782"),
    "ark": bytes.fromhex("c0b406a4a803495297433fb6014cd0ae"),
}
vcek = read(tee + "sev-snp/virtee-sev/vcek_milan.der")
head_len = 24 * 3
table = guids["vcek"] + struct.pack("<II", head_len, len(vcek))
table += b"\x00" * 24 + vcek
put("tee_snp", "cert_table_vcek", table)
other = bytes(range(16)) + struct.pack("<II", 48, 3) + b"\x00" * 24 + b"abc"
put("tee_snp", "cert_table_other", other)

spdm = bytes.fromhex(read(tee + "nvidia/nvtrust/hopperAttestationReport.txt").decode().strip())
put("tee_spdm", "hopper_evidence.bin", spdm)

for name in ["sev-snp/virtee-sev/vcek_milan.der", "pki/crl_root_revokes_intermediate.der", "pki/ocsp_good.der"]:
    put("tee_der", os.path.basename(name), read(tee + name))
put("tee_x509", "vcek_milan.der", read(tee + "sev-snp/virtee-sev/vcek_milan.der"))
put("tee_x509", "vcek_turin.der", read(tee + "sev-snp/virtee-sev/vcek_turin.der"))
put("tee_x509", "pki_chain.pem", read(tee + "pki/chain.pem"))
put("tee_x509", "hopper_chain.pem", read(tee + "nvidia/nvtrust/hopperCertChain.txt"))
for name in ["crl_root_revokes_intermediate.der", "crl_intermediate_clean.pem", "forged_ark_milan_crl.der"]:
    put("tee_crl", name, read(tee + "pki/" + name))
for name in ["ocsp_good.der", "ocsp_revoked.der", "ocsp_delegated_good.der", "forged_hopper_ocsp.der"]:
    put("tee_ocsp", name, read(tee + "pki/" + name))
put("tee_rim", "driver_rim.swidtag", read(tee + "nvidia/nvtrust/Driver_RIM_test_no_gpu.swidtag"))
put(
    "tee_rim",
    "small_unsigned.xml",
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<SoftwareIdentity xmlns="http://standards.iso.org/iso/19770/-2/2015/schema.xsd" '
    'xmlns:SHA384="http://www.w3.org/2001/04/xmldsig-more#sha384" name="GH100" version="1">'
    '<Meta colloquialVersion="535.86"/>'
    '<Payload><Resource type="Measurement" index="0" active="True" '
    'SHA384:Hash0="' + "ab" * 48 + '" SHA384:Hash1="' + "cd" * 48 + '"/>'
    '<Resource type="Measurement" index="7" active="false"/></Payload>'
    '<Signature xmlns="http://www.w3.org/2000/09/xmldsig#"><SignedInfo/></Signature>'
    "</SoftwareIdentity>\n",
)

# ---- inference: chat templates and schemas ----
chatml = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
put("chat_template", "chatml", chatml + "\x00Hello!")
llama2 = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'].strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'].strip() + ' ' + eos_token }}"
    "{% endif %}{% endfor %}"
)
put("chat_template", "llama2", llama2 + "\x00  What is 2+2?  ")
put(
    "chat_template",
    "macros",
    "{% macro turn(r, c) %}<{{ r|upper }}>{{ c|trim|replace('a', 'b') }}{% endmacro %}"
    "{% set ns = namespace(n=0) %}{% for m in messages if m.role != 'system' %}"
    "{{ turn(m.role, m.content) }}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}"
    "{{ messages|length }}{{ messages[0].content.startswith('Be') }}{{ range(3)|join(',') }}"
    "\x00a user",
)

schemas = {
    "object.txt": ({"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer"}},
                    "required": ["ok"], "additionalProperties": False}, '{"ok":true,"n":-12}'),
    "array.txt": ({"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 4},
                   "minItems": 1, "maxItems": 3}, '["ab","c\\u00e9"]'),
    "enum.txt": ({"enum": ["a", 1, None, {"k": [True]}]}, '{"k":[true]}'),
    "ref.txt": ({"$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"},
                                                                     "v": {"type": "number"}}}},
                 "$ref": "#/$defs/node"}, '{"v":1.5e3,"next":{"v":-0.25}}'),
    "types.txt": ({"type": ["string", "null", "number"], "const": None}, "null"),
    "any.txt": ({}, '{"a":[1,2,{"b":"\\n"}],"c":null}'),
    "bounds.txt": ({"type": "object", "properties": {
                        "age": {"type": "integer", "minimum": 0, "maximum": 150},
                        "t": {"type": "number", "exclusiveMinimum": -2.5, "exclusiveMaximum": 1e3}},
                    "required": ["age", "t"]}, '{"age":42,"t":-2}'),
    "decimals.txt": ({"type": "object", "properties": {
                          "score": {"type": "number", "minimum": 0, "maximum": 1},
                          "p": {"type": "number", "exclusiveMinimum": -0.05, "exclusiveMaximum": 0.125}},
                      "required": ["score", "p"]}, '{"score":0.85,"p":-0.0125}'),
    "unions.txt": ({"type": "array", "items": {"oneOf": [
                        {"type": "object", "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer"}},
                         "required": ["kind", "lives"], "additionalProperties": False},
                        {"type": "object", "properties": {"kind": {"const": "dog"}, "name": {"type": "string"}},
                         "required": ["kind"], "additionalProperties": False},
                        {"anyOf": [{"type": "integer"}, {"type": "number", "minimum": 0.5}]}]}},
                   '[{"lives":9,"kind":"cat"},{"kind":"dog"},2,0.75]'),
    "tuple.txt": ({"type": "array", "prefixItems": [{"type": "integer", "multipleOf": 3},
                                                    {"enum": ["a", "b"]}],
                   "items": False, "minItems": 1}, '[9,"b"]'),
}
for name, (s, doc) in schemas.items():
    put("schema_grammar", name, js(s) + "\x00" + doc)

# ---- appliance ----
bac = "appliance/market/tests/vectors/bacalhau/"
for name in sorted(os.listdir(os.path.join(ROOT, bac))):
    if name.endswith((".yml", ".yaml", ".json")) and name != "wasm.yaml":
        put("bacalhau_spec", name, read(bac + name))
# wasm.yaml with the smallest module instead of its 80 KB one
tiny_wasm = base64.b64encode(b"\x00asm\x01\x00\x00\x00").decode()
put(
    "bacalhau_spec",
    "wasm_small.yaml",
    """Name: Wasm Job
Type: batch
Count: 1
Tasks:
  - Name: main
    Engine:
      Type: wasm
      Params:
        EntryModule: wasm.main
        Entrypoint: _start
        Parameters: [a, 1, {x: y}]
    InputSources:
      - Target: /wasm.main
        Source:
          Type: inline
          Params:
            URL: data:application/wasm;base64,%s
      - Target: /inputs/data.txt
        Source:
          Type: urlDownload
          Params:
            URL: https://example.invalid/ab
      - Target: /inputs/local.txt
        Source:
          Type: local
          Params:
            SourcePath: data/local.txt
    ResultPaths:
      - Name: out
        Path: /outputs
    Resources:
      Memory: 64Mb
    Timeouts:
      ExecutionTimeout: 30
"""
    % tiny_wasm,
)
put(
    "bacalhau_spec",
    "wasm_small.json",
    js({"type": "batch", "tasks": [{"engine": {"type": "wasm", "params": {"EntryModule": "m"}},
                                     "InputSources": [{"Target": "m", "Source": {"Type": "inline",
                                                                                  "Params": {"URL": "text"}}}],
                                     "Resources": {"Memory": 1024}}]}),
)
print("seeds written under", os.path.relpath(CORPUS, ROOT))
