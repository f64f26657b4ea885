//! TLS for `wss://` peers.

use crate::{Error, Result};

/// TLS for a `wss://` peer: rustls on ring (the one provider this project uses), the web's
/// roots plus the certificates of `ca_pem`.
pub(super) fn tls_config(
    peer: &str,
    ca_pem: Option<&[u8]>,
) -> Result<std::sync::Arc<rustls::ClientConfig>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    let bad = |reason: String| Error::Sync {
        peer: peer.to_owned(),
        reason,
    };
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    if let Some(pem) = ca_pem {
        let mut added = 0;
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| bad(format!("--ca: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| bad(format!("--ca: not a usable CA certificate: {e}")))?;
            added += 1;
        }
        if added == 0 {
            return Err(bad("--ca: no PEM certificate in it".into()));
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| bad(format!("TLS: {e}")))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(std::sync::Arc::new(config))
}
