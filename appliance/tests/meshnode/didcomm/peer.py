#!/usr/bin/env python3
"""An independent DIDComm Messaging v2 peer, driven from the command line by the Rust tests.

The DIDComm work (packing, unpacking, JWE/JWS, key selection, checks) is done by PyPI
`didcomm` 0.3.2 (SICPA's didcomm-python, Apache-2.0, on Authlib, pycryptodomex and pydid),
an implementation independent of the Rust one; this script only gives it identities,
DID documents and a command line.

    peer.py init DIR
        a fresh did:nostr identity: DIR/doc.json (the DID document, in the shape the Rust
        node publishes: Multikey methods #key-0 secp256k1, #ed25519, #x25519) and
        DIR/secrets.json (a JSON array of private JWKs, kid = the method ids).
    peer.py pack --dir DIR --to-doc DOC.json --mode plaintext|signed|anoncrypt|authcrypt
            [--sign ed25519|secp256k1] [--protect-sender] [--enc A256CBC-HS512|A256GCM|XC20P]
            [--forward] [--doc MEDIATOR_DOC.json ...] --body JSON [--type URI] [--id ID]
            [--no-from]
        prints the packed message (one JSON text) on stdout. signed: EdDSA by #ed25519
        (default) or ES256K by #key-0. anoncrypt: ECDH-ES+A256KW with --enc (didcomm's
        default XC20P), signed inside first with --sign. authcrypt: ECDH-1PU+A256KW /
        A256CBC-HS512 from #x25519; --protect-sender wraps it in an anoncrypt layer (--enc);
        --sign signs inside first. No Forward wrapping unless --forward (then the
        recipient's DIDCommMessaging service and its routingKeys drive it; the routing
        keys' documents come from --doc, or did:key X25519 keys are resolved here).
    peer.py unpack --dir DIR [--sender-doc DOC.json ...] MESSAGE_FILE|-
        prints one JSON line {"message": <the plaintext as sent>, "metadata": {...}}; enum
        values are given as their names (enc_alg_anon "XC20P_ECDH_ES_A256KW", sign_alg
        "ED25519"/"ES256K"). A refusal exits 2 with the exception's class and message on
        stderr.
    peer.py selftest
        python<->python round trips of every mode, a Forward through a mediator, and
        refusals of tampered messages; exits 0 on success.

didcomm 0.3.2 does not know Multikey, so the resolver converts each Multikey method to a
JsonWebKey2020 one (OKP Ed25519/X25519 with x; EC secp256k1 with x and y from the
decompressed point); JsonWebKey2020 methods with publicKeyJwk are taken as they are.
"""
import argparse
import asyncio
import base64
import copy
import json
import os
import shutil
import sys
import tempfile
import time
import warnings

import authlib.deprecate  # noqa: E402 - sets its warning to "always" on import; then:

warnings.filterwarnings("ignore", category=authlib.deprecate.AuthlibDeprecationWarning)

import base58  # noqa: E402
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, x25519

from didcomm.common.algorithms import AnonCryptAlg
from didcomm.common.resolvers import ResolversConfig
from didcomm.did_doc.did_doc import DIDDoc
from didcomm.did_doc.did_resolver import DIDResolver
from didcomm.message import Message
from didcomm.pack_encrypted import PackEncryptedConfig, pack_encrypted
from didcomm.pack_plaintext import pack_plaintext
from didcomm.pack_signed import pack_signed
from didcomm.secrets.secrets_resolver_in_memory import SecretsResolverInMemory
from didcomm.secrets.secrets_util import jwk_to_secret
from didcomm.unpack import unpack

DEFAULT_TYPE = "https://fleetmesh.org/test/1.0/ping"
ANON_ENCS = {
    "A256CBC-HS512": AnonCryptAlg.A256CBC_HS512_ECDH_ES_A256KW,
    "A256GCM": AnonCryptAlg.A256GCM_ECDH_ES_A256KW,
    "XC20P": AnonCryptAlg.XC20P_ECDH_ES_A256KW,
}
SIGN_KEYS = {"ed25519": "#ed25519", "secp256k1": "#key-0"}

# secp256k1: p, n, and y from x (p = 3 mod 4)
P = 2**256 - 2**32 - 977
N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141


class Refused(Exception):
    pass


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2)
        f.write("\n")


def varint_decode(b):
    value, shift = 0, 0
    for i, byte in enumerate(b):
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, b[i + 1:]
        shift += 7
    raise ValueError("truncated multicodec varint")


def secp256k1_y(x, odd):
    y2 = (pow(x, 3, P) + 7) % P
    y = pow(y2, (P + 1) // 4, P)
    if y * y % P != y2:
        raise ValueError("not a secp256k1 x coordinate")
    return y if (y & 1) == odd else P - y


# ---------------------------------------------------------------- identities

def init(directory):
    os.makedirs(directory, exist_ok=True)
    d = ec.generate_private_key(ec.SECP256K1()).private_numbers().private_value
    pub = ec.derive_private_key(d, ec.SECP256K1()).public_key().public_numbers()
    if pub.y & 1:  # keep the even-y secret (BIP-340 style): 02||x is its real public key
        d = N - d
        pub = ec.derive_private_key(d, ec.SECP256K1()).public_key().public_numbers()
    assert pub.y & 1 == 0
    x_only = pub.x.to_bytes(32, "big")
    raw = serialization.Encoding.Raw, serialization.PublicFormat.Raw
    ed = ed25519.Ed25519PrivateKey.generate()
    xk = x25519.X25519PrivateKey.generate()
    ed_pub, x_pub = ed.public_key().public_bytes(*raw), xk.public_key().public_bytes(*raw)
    priv = (serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
            serialization.NoEncryption())
    did = "did:nostr:" + x_only.hex()
    doc = {
        "@context": ["https://www.w3.org/ns/did/v1", "https://w3id.org/security/multikey/v1"],
        "id": did,
        "verificationMethod": [
            {"id": did + "#key-0", "type": "Multikey", "controller": did,
             "publicKeyMultibase": "fe70102" + x_only.hex()},
            {"id": did + "#ed25519", "type": "Multikey", "controller": did,
             "publicKeyMultibase": "z" + base58.b58encode(bytes([0xED, 0x01]) + ed_pub).decode()},
            {"id": did + "#x25519", "type": "Multikey", "controller": did,
             "publicKeyMultibase": "z" + base58.b58encode(bytes([0xEC, 0x01]) + x_pub).decode()},
        ],
        "authentication": [did + "#key-0", did + "#ed25519"],
        "assertionMethod": [did + "#key-0", did + "#ed25519"],
        "keyAgreement": [did + "#x25519"],
        "service": [],
    }
    secrets = [
        {"kid": did + "#key-0", "kty": "EC", "crv": "secp256k1", "x": b64u(x_only),
         "y": b64u(pub.y.to_bytes(32, "big")), "d": b64u(d.to_bytes(32, "big"))},
        {"kid": did + "#ed25519", "kty": "OKP", "crv": "Ed25519", "x": b64u(ed_pub),
         "d": b64u(ed.private_bytes(*priv))},
        {"kid": did + "#x25519", "kty": "OKP", "crv": "X25519", "x": b64u(x_pub),
         "d": b64u(xk.private_bytes(*priv))},
    ]
    write_json(os.path.join(directory, "doc.json"), doc)
    write_json(os.path.join(directory, "secrets.json"), secrets)
    return did


# ---------------------------------------------------------------- resolution

def multikey_to_jwk(mb):
    if mb.startswith("z"):
        raw = base58.b58decode(mb[1:])
    elif mb.startswith("f"):
        raw = bytes.fromhex(mb[1:])
    elif mb.startswith("u"):
        raw = base64.urlsafe_b64decode(mb[1:] + "=" * (-len(mb[1:]) % 4))
    else:
        raise ValueError(f"unsupported multibase {mb[:1]!r}")
    codec, key = varint_decode(raw)
    if codec == 0xED and len(key) == 32:
        return {"kty": "OKP", "crv": "Ed25519", "x": b64u(key)}
    if codec == 0xEC and len(key) == 32:
        return {"kty": "OKP", "crv": "X25519", "x": b64u(key)}
    if codec == 0xE7 and len(key) == 33 and key[0] in (2, 3):
        x = int.from_bytes(key[1:], "big")
        y = secp256k1_y(x, key[0] & 1)
        return {"kty": "EC", "crv": "secp256k1", "x": b64u(key[1:]),
                "y": b64u(y.to_bytes(32, "big"))}
    raise ValueError(f"unsupported multicodec 0x{codec:x} ({len(key)} bytes)")


def absolute(did, ref):
    return did + ref if isinstance(ref, str) and ref.startswith("#") else ref


def convert_method(did, m):
    m = dict(m)
    m["id"] = absolute(did, m["id"])
    m.setdefault("controller", did)
    if m.get("type") == "Multikey":
        jwk = multikey_to_jwk(m.pop("publicKeyMultibase"))
        return {"id": m["id"], "type": "JsonWebKey2020", "controller": m["controller"],
                "publicKeyJwk": jwk}
    return m


def convert_service(did, s, key_agreement):
    """A DIDCommMessaging service in the shape didcomm 0.3.2 reads (pydid's
    DIDCommV1Service: a string serviceEndpoint, accept, routingKeys, recipientKeys),
    from either that shape or the DIDComm v2.1 one (serviceEndpoint {uri, accept,
    routingKeys}, or a list of those)."""
    ep = s.get("serviceEndpoint")
    if isinstance(ep, list):
        ep = ep[0] if ep else None
    if isinstance(ep, dict):
        uri, accept, routing = ep.get("uri"), ep.get("accept"), ep.get("routingKeys", [])
    else:
        uri, accept, routing = ep, s.get("accept"), s.get("routingKeys", [])
    return {"id": absolute(did, s["id"]), "type": "DIDCommMessaging",
            "serviceEndpoint": uri, "accept": accept or ["didcomm/v2"],
            "routingKeys": [absolute(did, k) for k in routing],
            "recipientKeys": s.get("recipientKeys", key_agreement)}


def convert_doc(doc):
    did = doc["id"]
    methods = []
    relations = {}
    for m in doc.get("verificationMethod", []):
        try:
            methods.append(convert_method(did, m))
        except ValueError:
            continue  # a key didcomm cannot use: left out, as are references to it
    ids = {m["id"] for m in methods}
    for rel in ("authentication", "assertionMethod", "keyAgreement"):
        refs = []
        for r in doc.get(rel, []):
            if isinstance(r, dict):
                try:
                    m = convert_method(did, r)
                except ValueError:
                    continue
                if m["id"] not in ids:
                    methods.append(m)
                    ids.add(m["id"])
                refs.append(m["id"])
            elif absolute(did, r) in ids:
                refs.append(absolute(did, r))
        relations[rel] = refs
    services = [convert_service(did, s, relations["keyAgreement"])
                for s in doc.get("service", []) or [] if s.get("type") == "DIDCommMessaging"]
    out = {"@context": doc.get("@context", ["https://www.w3.org/ns/did/v1"]), "id": did,
           "verificationMethod": methods, **relations}
    if services:
        out["service"] = services
    return DIDDoc.deserialize(out)


def did_key_doc(did):
    """did:key of an X25519 or Ed25519 key (routing keys are often did:key)."""
    mb = did.split(":", 2)[2].split("#")[0]
    jwk = multikey_to_jwk(mb)
    vm = {"id": f"{did}#{mb}", "type": "JsonWebKey2020", "controller": did,
          "publicKeyJwk": jwk}
    rel = "keyAgreement" if jwk["crv"] == "X25519" else "authentication"
    return DIDDoc.deserialize({"@context": ["https://www.w3.org/ns/did/v1"], "id": did,
                               "verificationMethod": [vm], rel: [vm["id"]]})


class Resolver(DIDResolver):
    def __init__(self, docs):
        self.docs = {}
        for d in docs:
            self.docs[d["id"]] = convert_doc(d)

    async def resolve(self, did):
        did = str(did)
        if did in self.docs:
            return self.docs[did]
        if did.startswith("did:key:"):
            try:
                return did_key_doc(did)
            except ValueError:
                return None
        return None


def resolvers(directory, doc_paths):
    docs = [read_json(os.path.join(directory, "doc.json"))]
    docs += [read_json(p) for p in doc_paths]
    secrets = [jwk_to_secret(j) for j in read_json(os.path.join(directory, "secrets.json"))]
    return ResolversConfig(secrets_resolver=SecretsResolverInMemory(secrets),
                           did_resolver=Resolver(docs)), docs[0]["id"]


# ---------------------------------------------------------------- pack / unpack

async def pack(directory, to_doc, mode, body, sign=None, protect_sender=False, enc=None,
               typ=DEFAULT_TYPE, msg_id=None, forward=False, extra_docs=(), no_from=False):
    cfg, did = resolvers(directory, [to_doc, *extra_docs])
    to = read_json(to_doc)["id"]
    msg = Message(type=typ, body=body, id=msg_id or None, frm=None if no_from else did,
                  to=[to], created_time=int(time.time()))
    if mode == "plaintext":
        return (await pack_plaintext(cfg, msg)).packed_msg
    sign_frm = did + SIGN_KEYS[sign] if sign else None
    if mode == "signed":
        return (await pack_signed(cfg, msg, sign_frm or did + "#ed25519")).packed_msg
    config = PackEncryptedConfig(protect_sender_id=protect_sender, forward=forward)
    if enc:
        config.enc_alg_anon = ANON_ENCS[enc]
    if mode == "anoncrypt":
        res = await pack_encrypted(cfg, msg, to=to, sign_frm=sign_frm, pack_config=config)
    elif mode == "authcrypt":
        if enc and enc != "A256CBC-HS512" and not protect_sender and not forward:
            raise ValueError("authcrypt (ECDH-1PU+A256KW) takes A256CBC-HS512 only; --enc "
                             "chooses the anoncrypt layers (--protect-sender, --forward)")
        res = await pack_encrypted(cfg, msg, to=to, frm=did + "#x25519", sign_frm=sign_frm,
                                   pack_config=config)
    else:
        raise ValueError(f"unknown mode {mode}")
    if res.service_metadata:
        print(f"service {res.service_metadata.id} endpoint "
              f"{res.service_metadata.service_endpoint}", file=sys.stderr)
    return res.packed_msg


def _name(v):
    return None if v is None else getattr(v, "name", str(v))


async def unpack_msg(directory, packed, sender_docs=()):
    cfg, _ = resolvers(directory, list(sender_docs))

    def as_sent(d):
        sent = copy.deepcopy(d)
        Message.from_dict(d)  # didcomm's own checks of the plaintext
        return sent

    try:
        res = await unpack(cfg, packed, deserializer=as_sent)
    except Exception as exc:  # noqa: BLE001 - every refusal is reported alike
        raise Refused(exc) from exc
    m = res.metadata
    meta = {
        "encrypted": m.encrypted,
        "authenticated": m.authenticated,
        "non_repudiation": m.non_repudiation,
        "anonymous_sender": m.anonymous_sender,
        "re_wrapped_in_forward": m.re_wrapped_in_forward,
        "encrypted_from": None if m.encrypted_from is None else str(m.encrypted_from),
        "encrypted_to": None if m.encrypted_to is None else [str(k) for k in m.encrypted_to],
        "sign_from": None if m.sign_from is None else str(m.sign_from),
        "enc_alg_auth": _name(m.enc_alg_auth),
        "enc_alg_anon": _name(m.enc_alg_anon),
        "sign_alg": _name(m.sign_alg),
    }
    return {"message": res.message, "metadata": meta}


def bench(n):
    """The benchmark baseline (`fleetmesh-bench didcomm`): two fresh identities; for each
    line read on stdin naming a mode (`authcrypt`, `anon-signed`), packs and unpacks `n`
    messages of about 300 bytes and prints the nanoseconds it took (startup excluded)."""
    import tempfile
    tmp = tempfile.mkdtemp()
    a, b = os.path.join(tmp, "a"), os.path.join(tmp, "b")
    init(a)
    init(b)
    a_doc, b_doc = os.path.join(a, "doc.json"), os.path.join(b, "doc.json")
    # resolvers made once, as a long-running agent would hold them
    body = {"protocol": "compute/1.0", "type": "job", "x": "x" * 240}

    a_cfg, a_did = resolvers(a, [b_doc])
    b_cfg, b_did = resolvers(b, [a_doc])
    config = PackEncryptedConfig(forward=False)
    config.enc_alg_anon = ANON_ENCS["A256CBC-HS512"]

    async def one_round(mode):
        for i in range(n):
            msg = Message(type=DEFAULT_TYPE, body=dict(body, n=i), frm=a_did, to=[b_did],
                          created_time=int(time.time()))
            if mode == "authcrypt":
                res = await pack_encrypted(a_cfg, msg, to=b_did, frm=a_did + "#x25519",
                                           pack_config=config)
            else:
                res = await pack_encrypted(a_cfg, msg, to=b_did, sign_frm=a_did + "#key-0",
                                           pack_config=config)
            await unpack(b_cfg, res.packed_msg)

    for line in sys.stdin:
        mode = line.strip()
        start = time.perf_counter_ns()
        asyncio.run(one_round(mode))
        print(time.perf_counter_ns() - start, flush=True)
    return 0


def describe(exc):
    cause = exc.__cause__ if isinstance(exc, Refused) and exc.__cause__ else exc
    text = getattr(cause, "message", None) or str(cause)
    inner = cause.__cause__ or cause.__context__
    if inner is not None:
        text += f" ({type(inner).__name__}: {inner})"
    return f"{type(cause).__name__}: {text}"


# ---------------------------------------------------------------- selftest

def selftest():
    tmp = tempfile.mkdtemp(prefix="didcomm-peer-")
    try:
        return _selftest(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _selftest(tmp):
    ok = True

    def check(cond, what):
        nonlocal ok
        print(("ok   " if cond else "FAIL ") + what)
        ok = ok and bool(cond)

    a, b, c = (os.path.join(tmp, n) for n in "abc")
    did_a, did_b, did_c = init(a), init(b), init(c)
    doc_a, doc_b, doc_c = (os.path.join(d, "doc.json") for d in (a, b, c))

    # the doc's key-0 is the secp256k1 key's real public key (02: even y)
    sec = read_json(os.path.join(a, "secrets.json"))[0]
    dd = int.from_bytes(base64.urlsafe_b64decode(sec["d"] + "=="), "big")
    pn = ec.derive_private_key(dd, ec.SECP256K1()).public_key().public_numbers()
    check(pn.y % 2 == 0 and did_a == "did:nostr:" + pn.x.to_bytes(32, "big").hex()
          and read_json(doc_a)["verificationMethod"][0]["publicKeyMultibase"]
          == "fe70102" + pn.x.to_bytes(32, "big").hex(), "init: did:nostr and 02||x key-0")

    body = {"n": 1, "text": "héllo"}
    kid = lambda did, k: did + k  # noqa: E731
    cases = [
        ("plaintext", {}, dict(encrypted=False, authenticated=False, non_repudiation=False)),
        ("signed", {"sign": "ed25519"}, dict(non_repudiation=True, authenticated=True,
                                             sign_alg="ED25519",
                                             sign_from=kid(did_a, "#ed25519"))),
        ("signed", {"sign": "secp256k1"}, dict(non_repudiation=True, sign_alg="ES256K",
                                               sign_from=kid(did_a, "#key-0"))),
        *[("anoncrypt", {"enc": e}, dict(encrypted=True, anonymous_sender=True,
                                         authenticated=False,
                                         enc_alg_anon=ANON_ENCS[e].name))
          for e in ANON_ENCS],
        ("anoncrypt", {"sign": "ed25519"}, dict(encrypted=True, non_repudiation=True,
                                                anonymous_sender=True,
                                                enc_alg_anon="XC20P_ECDH_ES_A256KW")),
        ("anoncrypt", {"sign": "secp256k1", "enc": "A256GCM"},
         dict(encrypted=True, non_repudiation=True, sign_alg="ES256K")),
        ("authcrypt", {}, dict(encrypted=True, authenticated=True, anonymous_sender=False,
                               encrypted_from=kid(did_a, "#x25519"),
                               encrypted_to=[kid(did_b, "#x25519")],
                               enc_alg_auth="A256CBC_HS512_ECDH_1PU_A256KW")),
        ("authcrypt", {"protect_sender": True},
         dict(encrypted=True, authenticated=True, anonymous_sender=True,
              encrypted_from=kid(did_a, "#x25519"), enc_alg_anon="XC20P_ECDH_ES_A256KW")),
        ("authcrypt", {"protect_sender": True, "enc": "A256CBC-HS512"},
         dict(anonymous_sender=True, enc_alg_anon="A256CBC_HS512_ECDH_ES_A256KW")),
        ("authcrypt", {"sign": "ed25519"}, dict(encrypted=True, authenticated=True,
                                                non_repudiation=True, sign_alg="ED25519")),
    ]
    packed_by_case = {}
    for mode, opts, want in cases:
        name = f"{mode} {opts}"
        try:
            packed = asyncio.run(pack(a, doc_b, mode, body, **opts))
            out = asyncio.run(unpack_msg(b, packed, [doc_a]))
        except Exception as exc:  # noqa: BLE001
            check(False, f"{name}: {describe(exc)}")
            continue
        packed_by_case[name] = packed
        m, meta = out["message"], out["metadata"]
        good = (m["body"] == body and m["from"] == did_a and m["to"] == [did_b]
                and m["type"] == DEFAULT_TYPE and isinstance(m["created_time"], int)
                and all(meta[k] == v for k, v in want.items()))
        check(good, f"{name} round trip" + ("" if good else f": {json.dumps(out)}"))

    # refusals: a changed ciphertext, tag, protected header or signature
    def refused(packed, who=b, docs=(doc_a,)):
        try:
            asyncio.run(unpack_msg(who, packed, list(docs)))
        except Refused:
            return True
        return False

    def flip(s):
        return ("B" if s[0] != "B" else "C") + s[1:]

    for name in ("anoncrypt {'enc': 'XC20P'}", "anoncrypt {'enc': 'A256GCM'}",
                 "anoncrypt {'enc': 'A256CBC-HS512'}", "authcrypt {}"):
        j = json.loads(packed_by_case[name])
        j["ciphertext"] = flip(j["ciphertext"])
        check(refused(json.dumps(j)), f"{name}: a changed ciphertext is refused")
    j = json.loads(packed_by_case["authcrypt {}"])
    j["tag"] = flip(j["tag"])
    check(refused(json.dumps(j)), "authcrypt: a changed tag is refused")
    j = json.loads(packed_by_case["signed {'sign': 'ed25519'}"])
    j["payload"] = flip(j["payload"])
    check(refused(json.dumps(j)), "signed EdDSA: a changed payload is refused")
    j = json.loads(packed_by_case["signed {'sign': 'secp256k1'}"])
    sig = bytearray(base64.urlsafe_b64decode(j["signatures"][0]["signature"] + "=="))
    sig[5] ^= 1
    j["signatures"][0]["signature"] = b64u(bytes(sig))
    check(refused(json.dumps(j)), "signed ES256K: a changed signature is refused")
    check(refused(packed_by_case["authcrypt {}"], who=c, docs=(doc_a,)),
          "authcrypt: another identity cannot unpack it")
    check(refused(packed_by_case["authcrypt {}"], docs=()),
          "authcrypt: refused when the sender's document is unknown")

    # Forward: b's DIDCommMessaging service routes through c's key
    doc_b_routed = os.path.join(tmp, "b-routed.json")
    d = read_json(doc_b)
    d["service"] = [{"id": did_b + "#didcomm", "type": "DIDCommMessaging",
                     "serviceEndpoint": {"uri": "https://mediator.example/",
                                         "accept": ["didcomm/v2"],
                                         "routingKeys": [did_c + "#x25519"]}}]
    write_json(doc_b_routed, d)
    try:
        packed = asyncio.run(pack(a, doc_b_routed, "authcrypt", body, forward=True,
                                  extra_docs=[doc_c]))
        fwd = asyncio.run(unpack_msg(c, packed, []))
        fm = fwd["message"]
        inner = fm["attachments"][0]["data"]["json"]
        out = asyncio.run(unpack_msg(b, json.dumps(inner), [doc_a]))
        check(fm["type"] == "https://didcomm.org/routing/2.0/forward"
              and fm["body"] == {"next": did_b} and fwd["metadata"]["anonymous_sender"]
              and out["message"]["body"] == body and out["metadata"]["authenticated"],
              "forward: the mediator opens the Forward, the recipient the message in it")
    except Exception as exc:  # noqa: BLE001
        check(False, f"forward: {describe(exc)}")
    return 0 if ok else 1


# ---------------------------------------------------------------- command line

def main(argv):
    p = argparse.ArgumentParser(prog="peer.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("init")
    s.add_argument("dir")
    s = sub.add_parser("pack")
    s.add_argument("--dir", required=True)
    s.add_argument("--to-doc", required=True)
    s.add_argument("--mode", required=True,
                   choices=["plaintext", "signed", "anoncrypt", "authcrypt"])
    s.add_argument("--sign", choices=sorted(SIGN_KEYS))
    s.add_argument("--protect-sender", action="store_true")
    s.add_argument("--enc", choices=sorted(ANON_ENCS))
    s.add_argument("--forward", action="store_true")
    s.add_argument("--doc", action="append", default=[],
                   help="another DID document to resolve (a mediator's)")
    s.add_argument("--body", required=True)
    s.add_argument("--type", default=DEFAULT_TYPE)
    s.add_argument("--id")
    s.add_argument("--no-from", action="store_true", help="leave the `from` header out")
    s = sub.add_parser("unpack")
    s.add_argument("--dir", required=True)
    s.add_argument("--sender-doc", action="append", default=[])
    s.add_argument("message")
    sub.add_parser("selftest")
    s = sub.add_parser("bench")
    s.add_argument("n", type=int)
    args = p.parse_args(argv)

    if args.cmd == "init":
        print(init(args.dir))
        return 0
    if args.cmd == "selftest":
        return selftest()
    if args.cmd == "bench":
        return bench(args.n)
    if args.cmd == "pack":
        try:
            body = json.loads(args.body)
            if not isinstance(body, dict):
                raise ValueError("--body must be a JSON object")
            out = asyncio.run(pack(args.dir, args.to_doc, args.mode, body, sign=args.sign,
                                   protect_sender=args.protect_sender, enc=args.enc,
                                   typ=args.type, msg_id=args.id, forward=args.forward,
                                   extra_docs=args.doc, no_from=args.no_from))
        except Exception as exc:  # noqa: BLE001
            print(f"peer.py pack: {describe(exc)}", file=sys.stderr)
            return 1
        print(out)
        return 0
    # unpack
    if args.message == "-":
        packed = sys.stdin.read()
    else:
        with open(args.message, encoding="utf-8") as f:
            packed = f.read()
    try:
        out = asyncio.run(unpack_msg(args.dir, packed, args.sender_doc))
    except Refused as exc:
        print(describe(exc), file=sys.stderr)
        return 2
    print(json.dumps(out, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
