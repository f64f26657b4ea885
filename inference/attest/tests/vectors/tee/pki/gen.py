#!/usr/bin/env python3
"""Regenerates the revocation fixtures beside this script (Python `cryptography` >= 42).

A test PKI (ECDSA P-384, SHA-384): root CA -> intermediate CA (pathLen 0) -> leaf, and a
delegated OCSP responder issued by the intermediate. CRLs and OCSP responses about it, and
two forgeries about the real vendored chains: a CRL naming AMD's ARK-Milan as issuer and an
OCSP response naming the Hopper device chain's issuer, both signed by a test key. All times
are fixed around the tests' clock (2026-06-01T00:00:00Z). Keys are fresh on each run: run
it, then the tests, and commit the files together.

    python3 inference/attest/tests/vectors/tee/pki/gen.py
"""
import datetime as dt
import pathlib

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509 import ocsp
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

HERE = pathlib.Path(__file__).resolve().parent
VECTORS = HERE.parent
T = dt.datetime(2026, 5, 1, tzinfo=dt.timezone.utc)
SHA384 = hashes.SHA384()


def name(cn):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def key():
    return ec.generate_private_key(ec.SECP384R1())


def cert(cn, k, issuer_cn, issuer_key, serial, ca=None, eku=None):
    b = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(name(issuer_cn))
         .public_key(k.public_key()).serial_number(serial)
         .not_valid_before(dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc))
         .not_valid_after(dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)))
    if ca is not None:
        b = b.add_extension(x509.BasicConstraints(ca=True, path_length=ca), critical=True)
        usage = dict(key_cert_sign=True, crl_sign=True, digital_signature=False)
    else:
        usage = dict(key_cert_sign=False, crl_sign=False, digital_signature=True)
    b = b.add_extension(x509.KeyUsage(content_commitment=False, key_encipherment=False,
                                      data_encipherment=False, key_agreement=False,
                                      encipher_only=False, decipher_only=False, **usage),
                        critical=True)
    if eku:
        b = b.add_extension(x509.ExtendedKeyUsage(eku), critical=False)
    return b.sign(issuer_key, SHA384)


def pem(*certs):
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


def crl(issuer_cn, k, revoked, this_update=T, next_update=T + dt.timedelta(days=90)):
    b = (x509.CertificateRevocationListBuilder().issuer_name(issuer_cn)
         .last_update(this_update).next_update(next_update)
         .add_extension(x509.CRLNumber(7), critical=False))
    for serial in revoked:
        b = b.add_revoked_certificate(
            x509.RevokedCertificateBuilder().serial_number(serial)
            .revocation_date(T - dt.timedelta(days=3)).build())
    return b.sign(k, SHA384)


def ocsp_response(leaf, issuer, responder, k, status, certs=None):
    b = ocsp.OCSPResponseBuilder().add_response(
        cert=leaf, issuer=issuer, algorithm=hashes.SHA1(), cert_status=status,
        this_update=T, next_update=T + dt.timedelta(days=60),
        revocation_time=(T - dt.timedelta(days=2)) if status == ocsp.OCSPCertStatus.REVOKED else None,
        revocation_reason=x509.ReasonFlags.key_compromise if status == ocsp.OCSPCertStatus.REVOKED else None,
    ).responder_id(ocsp.OCSPResponderEncoding.HASH, responder)
    if certs:
        b = b.certificates(certs)
    return b.sign(k, SHA384).public_bytes(serialization.Encoding.DER)


def main():
    root_k, inter_k, leaf_k, resp_k = key(), key(), key(), key()
    root = cert("fleetmesh test root", root_k, "fleetmesh test root", root_k, 0x1001, ca=1)
    inter = cert("fleetmesh test intermediate", inter_k, "fleetmesh test root", root_k, 0x2002, ca=0)
    leaf = cert("fleetmesh test leaf", leaf_k, "fleetmesh test intermediate", inter_k, 0x3003)
    responder = cert("fleetmesh test OCSP responder", resp_k, "fleetmesh test intermediate",
                     inter_k, 0x4004, eku=[ExtendedKeyUsageOID.OCSP_SIGNING])
    (HERE / "chain.pem").write_bytes(pem(leaf, inter, root))
    (HERE / "crl_root_revokes_intermediate.der").write_bytes(
        crl(name("fleetmesh test root"), root_k, [0x2002]).public_bytes(serialization.Encoding.DER))
    (HERE / "crl_intermediate_clean.pem").write_bytes(
        crl(name("fleetmesh test intermediate"), inter_k, [0x9999]).public_bytes(serialization.Encoding.PEM))
    good, revoked = ocsp.OCSPCertStatus.GOOD, ocsp.OCSPCertStatus.REVOKED
    (HERE / "ocsp_good.der").write_bytes(ocsp_response(leaf, inter, inter, inter_k, good))
    (HERE / "ocsp_revoked.der").write_bytes(ocsp_response(leaf, inter, inter, inter_k, revoked))
    (HERE / "ocsp_delegated_good.der").write_bytes(
        ocsp_response(leaf, inter, responder, resp_k, good, certs=[responder]))

    # forgeries about the real chains, signed by a key of ours
    ark = x509.load_pem_x509_certificates(
        (VECTORS / "sev-snp/virtee-sev/cert_chain_milan").read_bytes())[1]
    (HERE / "forged_ark_milan_crl.der").write_bytes(
        crl(ark.subject, key(), []).public_bytes(serialization.Encoding.DER))
    gpu = x509.load_pem_x509_certificates((VECTORS / "nvidia/nvtrust/hopperCertChain.txt").read_bytes())
    forger = key()
    # a certificate of ours under the name of the device certificate's issuer
    impostor = (x509.CertificateBuilder().subject_name(gpu[1].subject).issuer_name(gpu[1].subject)
                .public_key(forger.public_key()).serial_number(0x5005)
                .not_valid_before(T).not_valid_after(T + dt.timedelta(days=365))
                .sign(forger, SHA384))
    b = ocsp.OCSPResponseBuilder().add_response(
        cert=gpu[0], issuer=gpu[1], algorithm=hashes.SHA1(), cert_status=good,
        this_update=T, next_update=T + dt.timedelta(days=60),
        revocation_time=None, revocation_reason=None,
    ).responder_id(ocsp.OCSPResponderEncoding.NAME, impostor)
    (HERE / "forged_hopper_ocsp.der").write_bytes(
        b.sign(forger, SHA384).public_bytes(serialization.Encoding.DER))


if __name__ == "__main__":
    main()
