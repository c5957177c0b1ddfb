//! The HTTP client for every store: the one `object_store` builds from the [`ClientOptions`]
//! (reqwest over rustls, with the timeouts and certificate authorities set there), wrapped so that
//! a TLS handshake refused over the server's certificate is not retried.
//!
//! `object_store` classifies every error of reqwest's connect step as
//! [`HttpErrorKind::Connect`], a failed TLS handshake included, and retries that kind always:
//! an untrusted certificate was asked for `max_retries` more times, with backoff, though no retry
//! can change the answer (`curl` fails at once). The wrapper gives such an error the kind
//! [`HttpErrorKind::Unknown`], which `object_store` does not retry, leaving its message and causes
//! as they were; refused, reset and timed-out connections keep their kinds and their retries.

use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse, HttpService,
    ReqwestConnector,
};
use object_store::ClientOptions;
use std::error::Error;
use std::fmt;

/// The [`HttpConnector`] given to every store builder: `object_store`'s default client, its
/// certificate errors made final.
#[derive(Debug, Default)]
pub(crate) struct CertificateErrorsFinal;

impl HttpConnector for CertificateErrorsFinal {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let client = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(Service(client)))
    }
}

/// The default client, whose errors pass through [`final_if_certificate`].
#[derive(Debug)]
struct Service(HttpClient);

#[async_trait::async_trait]
impl HttpService for Service {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        self.0.execute(req).await.map_err(final_if_certificate)
    }
}

/// `e` with the kind [`HttpErrorKind::Unknown`] (not retried) if the server's certificate was
/// refused; else `e` as it is.
fn final_if_certificate(e: HttpError) -> HttpError {
    if e.kind() != HttpErrorKind::Unknown && is_certificate_error(&e) {
        HttpError::new(HttpErrorKind::Unknown, Rekinded(e))
    } else {
        e
    }
}

/// Whether `e`, or an error under it, is rustls refusing the server's certificate: not trusted
/// (an unknown issuer), expired, for another name, malformed, or none presented. A retry meets the
/// same certificate; a connection refused or reset, a timeout or another handshake failure is not
/// one of these.
pub(crate) fn is_certificate_error(e: &(dyn Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return matches!(
                tls,
                rustls::Error::InvalidCertificate(_)
                    | rustls::Error::NoCertificatesPresented
                    | rustls::Error::UnsupportedNameType
                    | rustls::Error::InvalidCertRevocationList(_)
            );
        }
        // An `io::Error`'s `source()` skips the error it wraps (tokio-rustls wraps rustls's so).
        next = match e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as &(dyn Error + 'static)),
            None => e.source(),
        };
    }
    false
}

/// An [`HttpError`] under another kind, shown as it was: its message and its causes, without a
/// second `HTTP error:` before them.
#[derive(Debug)]
struct Rekinded(HttpError);

impl fmt::Display for Rekinded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.source() {
            Some(cause) => fmt::Display::fmt(cause, f),
            None => fmt::Display::fmt(&self.0, f),
        }
    }
}

impl Error for Rekinded {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.0.source().and_then(Error::source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    /// The error reqwest gives for a handshake rustls refused, as its causes nest it: rustls's
    /// error inside an `io::Error` inside the connector's error.
    #[derive(Debug)]
    struct Outer(io::Error);

    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("client error (Connect)")
        }
    }

    impl Error for Outer {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }

    fn handshake(e: rustls::Error) -> HttpError {
        let io = io::Error::new(io::ErrorKind::InvalidData, e);
        HttpError::new(HttpErrorKind::Connect, Outer(io))
    }

    #[test]
    fn an_untrusted_certificate_is_not_retried_and_reads_as_before() {
        let e = handshake(rustls::Error::InvalidCertificate(
            rustls::CertificateError::UnknownIssuer,
        ));
        let was = e.to_string();
        let e = final_if_certificate(e);
        assert_eq!(e.kind(), HttpErrorKind::Unknown);
        assert_eq!(e.to_string(), was, "the message is unchanged");
        assert!(
            is_certificate_error(&e),
            "still told as a certificate error"
        );
        let cause = e.source().and_then(Error::source).expect("the causes kept");
        assert!(cause.downcast_ref::<io::Error>().is_some(), "{cause:?}");
    }

    #[test]
    fn connection_failures_and_other_handshake_errors_keep_their_kind() {
        for kind in [
            io::ErrorKind::ConnectionRefused,
            io::ErrorKind::ConnectionReset,
            io::ErrorKind::TimedOut,
        ] {
            let e = HttpError::new(HttpErrorKind::Connect, Outer(io::Error::from(kind)));
            assert_eq!(final_if_certificate(e).kind(), HttpErrorKind::Connect);
        }
        let e = handshake(rustls::Error::DecryptError);
        assert_eq!(final_if_certificate(e).kind(), HttpErrorKind::Connect);
    }
}
