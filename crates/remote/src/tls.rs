//! The HTTP client for every store: the one `object_store` builds from the [`ClientOptions`]
//! (reqwest over rustls, with the timeouts and certificate authorities set there), wrapped so that
//! a TLS handshake refused over the server's certificate is not retried, and so that a server that
//! goes silent is given up on after [`Connector::stall`] rather than after the whole request's time.
//!
//! `object_store` classifies every error of reqwest's connect step as
//! [`HttpErrorKind::Connect`], a failed TLS handshake included, and retries that kind always:
//! an untrusted certificate was asked for `max_retries` more times, with backoff, though no retry
//! can change the answer (`curl` fails at once). The wrapper gives such an error the kind
//! [`HttpErrorKind::Unknown`], which `object_store` does not retry, leaving its message and causes
//! as they were; refused, reset and timed-out connections keep their kinds and their retries.
//!
//! A request's own timeout must allow a whole range over a slow link, so it is long (30 s); a
//! connection kept open from an earlier request to a host that has since gone silent (dropping
//! packets) waited all of it, once for each connection in the pool. The wrapper ends a request
//! that has had no answer, or whose body has had no byte, for [`Connector::stall`] (10 s by
//! default), as a timeout, which `object_store` and the reader retry over a new connection.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse,
    HttpResponseBody, HttpService, ReqwestConnector,
};
use object_store::ClientOptions;
use std::error::Error;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// The [`HttpConnector`] given to every store builder: `object_store`'s default client, its
/// certificate errors made final and its silences bounded.
#[derive(Debug)]
pub(crate) struct Connector {
    /// The longest a request may wait for its answer, or its body for its next bytes.
    pub stall: Duration,
}

impl HttpConnector for Connector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let client = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(Service {
            client,
            stall: self.stall,
        }))
    }
}

/// The default client, whose errors pass through [`final_if_certificate`] and whose silences
/// end after `stall`.
#[derive(Debug)]
struct Service {
    client: HttpClient,
    stall: Duration,
}

#[async_trait::async_trait]
impl HttpService for Service {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let stall = self.stall;
        let answer = tokio::time::timeout(stall, self.client.execute(req))
            .await
            .map_err(|_| Stalled::error("no answer", stall))?
            .map_err(final_if_certificate)?;
        Ok(answer.map(|body| {
            HttpResponseBody::new(Watched {
                body,
                stall,
                timer: None,
            })
        }))
    }
}

/// A server that stopped sending: no answer, or no more of a body, for this long.
#[derive(Debug)]
struct Stalled {
    what: &'static str,
    after: Duration,
}

impl Stalled {
    fn error(what: &'static str, after: Duration) -> HttpError {
        HttpError::new(HttpErrorKind::Timeout, Stalled { what, after })
    }
}

impl fmt::Display for Stalled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} from the server for {:?}", self.what, self.after)
    }
}

impl Error for Stalled {}

/// A response body that fails as [`Stalled`] once it has been waited on for `stall` without a
/// byte (the time counts only while it is read, so a reader that pauses is not cut off).
struct Watched {
    body: HttpResponseBody,
    stall: Duration,
    /// Running while a read waits.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Body for Watched {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.timer = None;
                Poll::Ready(frame)
            }
            Poll::Pending => {
                let stall = this.stall;
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        this.timer = None;
                        Poll::Ready(Some(Err(Stalled::error("no more of the body", stall))))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
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
