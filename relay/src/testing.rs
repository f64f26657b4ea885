//! Test support for this crate's users (feature `test-utils`): a test CA and a loopback
//! certificate signed by it, and a TLS front with them, for tests of `wss://` peers (and
//! TLS servers of other kinds) reached with a given CA.

/// A test CA and a certificate for `127.0.0.1` and `localhost` signed by it, DER.
#[derive(Debug, Clone)]
pub struct LoopbackCert {
    /// The CA's certificate.
    pub ca: Vec<u8>,
    /// The server's certificate.
    pub cert: Vec<u8>,
    /// The server's private key, PKCS #8.
    pub key: Vec<u8>,
}

impl LoopbackCert {
    /// A new CA and server certificate.
    pub fn generate() -> LoopbackCert {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .unwrap()
            .signed_by(&key, &Issuer::from_params(&ca_params, &ca_key))
            .unwrap();
        LoopbackCert {
            ca: ca.der().to_vec(),
            cert: cert.der().to_vec(),
            key: key.serialize_der(),
        }
    }

    /// The server's private key as PEM.
    pub fn key_pem(&self) -> String {
        pem_of("PRIVATE KEY", &self.key)
    }
}

/// A TLS front for the relay at `plain` (`ws://HOST:PORT`): a test CA, a certificate for
/// `127.0.0.1` and `localhost` signed by it, and a task that decrypts each connection and
/// copies its bytes to and from the relay. The `wss://` URL and the CA's PEM.
pub async fn tls_front(plain: &str) -> (String, String, tokio::task::JoinHandle<()>) {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    let certs = LoopbackCert::generate();
    let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![CertificateDer::from(certs.cert.clone())],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(certs.key.clone())),
    )
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let upstream = plain
        .trim_start_matches("ws://")
        .trim_end_matches('/')
        .to_owned();
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, upstream) = (acceptor.clone(), upstream.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut relay) = tokio::net::TcpStream::connect(&upstream).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut relay).await;
            });
        }
    });
    (format!("wss://{addr}/"), pem(&certs.ca), task)
}

/// A DER certificate as PEM.
pub fn pem(der: &[u8]) -> String {
    pem_of("CERTIFICATE", der)
}

/// DER as PEM under `label`.
fn pem_of(label: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = b64
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect();
    format!(
        "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
        lines.join("\n")
    )
}
