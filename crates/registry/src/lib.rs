//! sealfs images in OCI registries: image references, credentials, manifests and indexes, blobs
//! read lazily by range or streamed whole with their digest checked, and push with signatures as
//! referrers.
//!
//! # Design
//!
//! - **A registry is one more source.** A sealfs image is an OCI artifact ([`manifest`] describes
//!   its layout): one blob holding the sealed image (or two, a plain EROFS image and its seal).
//!   Reading it lazily is [`Registry::blob_object`]: a [`sealfs_remote::RemoteObject`] over the blob,
//!   so the reads are the ones an `https://` image gets (batched with their Merkle hash blocks,
//!   coalesced, concurrent, retried, through the persistent cache of verified blocks), only the
//!   requests are `GET /v2/REPO/blobs/DIGEST` with `Range`. The registry adds one manifest round
//!   trip at open and nothing per read.
//! - **Pinned.** A tag is resolved once ([`locate`]): the manifest's digest is what the session
//!   reads from, its bytes checked against the digest the reference names (if it does) and the one
//!   the registry states. Blobs are content-addressed, so a tag moved meanwhile changes nothing
//!   for a mount; a blob deleted is an error naming it.
//! - **Trust.** A manifest found by tag is the registry's word: opening one needs a digest or a key,
//!   as an HTTP image does ([`open`]). A reference named by manifest digest
//!   (`oci://HOST/REPO@sha256:...`) fixes the manifest, hence the image digest it states: that is
//!   an expected digest like `--digest`. Signatures are found through the referrers.
//! - **Push** ([`push_image`]): HEAD first, then a cross-repository mount when asked, then an
//!   upload: monolithic up to the chunk size, else chunked and resumable after a dropped
//!   connection; then the manifest, then the signatures as a referrer artifact (the referrers API
//!   where the registry takes the `subject`, the `sha256-<hex>` tag otherwise).
//! - **For builds from container images** (`sealfs build --oci`), the same client gives
//!   [`Registry::image_manifest`] (an index resolved for a [`manifest::PlatformSpec`]) and
//!   [`Registry::blob_reader`] (a layer streamed with its digest checked as it is read).
//!
//! # Which OCI client, and why
//!
//! `oci-client` (the ORAS project's, formerly `oci-distribution`) does the token flow (parsing
//! `WWW-Authenticate`, asking the token endpoint with or without credentials, caching the token
//! until it expires), ranged blob streams that say whether the registry honoured the range
//! (`pull_blob_stream_partial`: a 206 or the whole blob), digest-checked whole streams, HEAD,
//! cross-repository mounts and referrers with the tag-schema fallback. Redirects to storage are
//! followed by its HTTP client (reqwest), which drops `Authorization` on a redirect to another
//! host. It does not resume a chunked upload (its uploads read from memory or from a stream it
//! cannot rewind), does not say whether a registry took a manifest's `subject` (`OCI-Subject`), and
//! does not check a fetched manifest against the `Content-Type` or the stated digest the way a
//! pinned session needs; those requests are this crate's own ([`client`], [`push`]), authorized
//! with `oci-client`'s tokens. Credentials from docker's `config.json` (and credential helpers) are
//! read by `docker_credential`. Other crates were weighed: `oci-spec` has the types but no client;
//! `docker-registry` and `dkregistry` are unmaintained and lack referrers; `containers-image-proxy`
//! drives skopeo as a subprocess and cannot read ranges.
//!
//! # Reference scheme
//!
//! `oci://HOST[:PORT]/REPO[:TAG][@sha256:HEX]` over HTTPS, `oci+http://...` over plain HTTP
//! (named, never a fallback), `docker://` as `oci://` (see [`reference`]).

pub mod auth;
mod blob;
pub mod client;
mod error;
pub mod manifest;
mod open;
pub mod pull;
pub mod push;
pub mod reference;

pub use auth::Credentials;
pub use blob::BlobReader;
pub use client::{FetchedManifest, Registry, RegistryOptions};
pub use error::RegistryError;
pub use open::{locate, open, Opened, RegistryImage, MAX_SIGNATURE_BYTES};
pub use pull::{pull, PullReport};
pub use push::{push_image, PushOptions, PushReport};
pub use reference::{is_image_ref, ImageRef, Transport};
