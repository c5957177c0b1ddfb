//! `sealfs digest` and `sealfs verify`: re-hash the EROFS bytes and check them against the seal (the
//! engine is [`sealfs_reader::check`]; this parses, prints and picks exit codes).

use crate::open::location;
use crate::progress::TermProgress;
use anyhow::{anyhow, Result};
use clap::Args;
use sealfs_reader::check::{self, CheckOptions, Problem, Report};
use sealfs_reader::{ErrorChain, OpenError};
use sealfs_verity::{Digest, HashAlg};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::read::{EXIT_CANNOT_RUN, EXIT_IMAGE};

/// Arguments of `sealfs verify`.
#[derive(Args)]
pub struct VerifyArgs {
    /// The image: a path, an `http://`, `https://` or `s3://` URL, or an image in a registry
    /// (`oci://HOST/REPO:TAG`, `@sha256:...` to name its manifest by digest).
    image: PathBuf,
    /// The digest the image must have (`sha256:<hex>`): without it, verify shows only that the image
    /// agrees with its own seal.
    #[arg(long, value_name = "DIGEST")]
    digest: Option<String>,
    /// Read the seal from this sidecar file (a path or a URL).
    #[arg(long, value_name = "PATH")]
    sidecar: Option<PathBuf>,
    #[command(flatten)]
    keys: crate::open::KeyArgs,
    #[command(flatten)]
    tls: crate::open::TlsArgs,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
    /// Stop listing problems after this many.
    #[arg(long, default_value_t = 100)]
    max_problems: usize,
}

/// What an image must be checked against (`verify`'s options, and `digest`'s when it is given
/// any): the expected digest, the keys and their version floor, and where the seal and the
/// detached signatures are read from.
struct Expected<'a> {
    image: &'a std::path::Path,
    digest: Option<Digest>,
    keys: Vec<sealfs_trust::PublicKey>,
    min_version: Option<sealfs_trust::Version>,
    sidecar: Option<&'a std::path::Path>,
    signatures: Option<&'a std::path::Path>,
    tls: &'a crate::open::TlsArgs,
    max_problems: usize,
}

/// What vouches for an image: the expected digest, the keys, the version floor.
type Anchors = (
    Option<Digest>,
    Vec<sealfs_trust::PublicKey>,
    Option<sealfs_trust::Version>,
);

/// Parses `--digest`, `--key`/`--keyring` and `--min-version`; a malformed one is a usage error
/// (printed; exit 2).
fn parse_expected(digest: Option<&str>, keys: &crate::open::KeyArgs) -> Result<Anchors, ExitCode> {
    let expected = digest.map(str::parse::<Digest>).transpose().map_err(|e| {
        eprintln!("sealfs: error: --digest: {e}");
        ExitCode::from(EXIT_CANNOT_RUN)
    })?;
    let (keys, min_version) = keys
        .load()
        .and_then(|k| Ok((k, keys.min_version()?)))
        .map_err(|e| {
            eprintln!("sealfs: error: {}", ErrorChain(e.as_ref()));
            ExitCode::from(EXIT_CANNOT_RUN)
        })?;
    Ok((expected, keys, min_version))
}

/// Checks every byte of the image (a path, URL or registry reference) as [`check::check`] does,
/// against `e`; an image in a registry is resolved once, its signatures found through its
/// referrers, and a reference pinned by digest expects the image digest its manifest states
/// (unless a digest or keys are given). `Err` is the exit code, the error printed: 1 when the
/// image is at fault (or the registry served content other than what names it), else 2 (the
/// check could not run).
fn check_image(e: Expected<'_>, progress: &TermProgress) -> Result<Report, ExitCode> {
    // An image in a registry: its manifest resolved once, the blob read by range, the signatures
    // from its referrers, and (named by digest) the image digest the manifest states.
    let registry = (|| -> Result<_> {
        let Some((image, found_sidecar, found)) = crate::open::registry_sources(e.image, e.tls)?
        else {
            return Ok(None);
        };
        let name = found.reference().to_string();
        let sidecar = match e.sidecar {
            Some(p) => Some(location(p, e.tls)?),
            None => found_sidecar,
        };
        let signatures = match e.signatures {
            Some(p) => Some(location(p, e.tls)?),
            None if !e.keys.is_empty() => found.signatures()?.map(|b| {
                sealfs_reader::Source::reader(std::sync::Arc::new(b), format!("{name} (referrers)"))
            }),
            None => None,
        };
        Ok(Some((image, sidecar, signatures, found.pinned_digest())))
    })();
    let registry = match registry {
        Ok(r) => r,
        Err(err) => {
            eprintln!("sealfs: error: {}", ErrorChain(err.as_ref()));
            let content = err
                .downcast_ref::<sealfs_registry::RegistryError>()
                .is_some_and(|r| r.is_content_fault());
            return Err(ExitCode::from(if content {
                EXIT_IMAGE
            } else {
                EXIT_CANNOT_RUN
            }));
        }
    };
    let pinned = registry.as_ref().and_then(|r| r.3);
    let digest = e.digest.or(if e.keys.is_empty() { pinned } else { None });
    let options = CheckOptions {
        digest,
        keys: e.keys,
        min_version: e.min_version,
        max_problems: e.max_problems,
        ..CheckOptions::default()
    };
    let checked = match registry {
        Some((image, sidecar, signatures, _)) => {
            let options = CheckOptions {
                sidecar,
                signatures,
                ..options
            };
            check::check(image, &options, progress)
        }
        None => {
            let sources = sealfs_remote::CheckSources {
                sidecar: e.sidecar,
                signatures: e.signatures,
            };
            sealfs_remote::check(
                e.image,
                sources,
                &options,
                &e.tls.remote_options(),
                progress,
            )
        }
    };
    checked.map_err(|err| {
        eprintln!("sealfs: error: {}", ErrorChain(&err));
        ExitCode::from(if err.is_image_fault() {
            EXIT_IMAGE
        } else {
            EXIT_CANNOT_RUN
        })
    })
}

/// Runs `sealfs verify`: exit 0 verified, 1 mismatch, 2 could not run.
pub fn run_verify(args: VerifyArgs) -> Result<ExitCode> {
    let progress = TermProgress::new(args.json);
    let (digest, keys, min_version) = match parse_expected(args.digest.as_deref(), &args.keys) {
        Ok(x) => x,
        Err(code) => return Ok(code),
    };
    let expected = Expected {
        image: &args.image,
        digest,
        keys,
        min_version,
        sidecar: args.sidecar.as_deref(),
        signatures: args.keys.signatures.as_deref(),
        tls: &args.tls,
        max_problems: args.max_problems,
    };
    let outcome = match check_image(expected, &progress) {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    for note in &outcome.notes {
        eprintln!("sealfs: note: {note}");
    }
    report(&args, &outcome);
    Ok(if outcome.is_verified() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_IMAGE)
    })
}

fn report(args: &VerifyArgs, o: &Report) {
    let ok = o.problems.is_empty();
    if args.json {
        let v = o.to_json(args.image.as_os_str().as_bytes());
        println!("{v}");
        return;
    }
    for p in &o.problems {
        match p {
            Problem::Trailer(what) => eprintln!("{what}"),
            Problem::Signature(_) => eprintln!("{}: {p}", sealfs_text::escape_path(&args.image)),
            _ => eprintln!("{}: {p}", sealfs_text::escape_path(&args.image)),
        }
    }
    let digest = o.digest.map_or("-".to_string(), |d| d.to_string());
    match (ok, o.authenticated) {
        (true, true) if o.signed_by.is_some() => println!(
            "{}: verified {digest}: authenticated: signed by {}{}",
            sealfs_text::escape_path(&args.image),
            o.signed_by.expect("checked"),
            if args.digest.is_some() { " (and matches --digest)" } else { "" }
        ),
        (true, true) => println!(
            "{}: verified {digest}: authenticated (matches {})",
            sealfs_text::escape_path(&args.image),
            if args.digest.is_some() { "--digest" } else { "the image digest the manifest named by digest states" }
        ),
        (true, false) => println!(
            "{}: self-consistent {digest}: every block matches the seal, but the seal is not authenticated (give --digest)",
            sealfs_text::escape_path(&args.image)
        ),
        (false, _) => println!("{}: FAILED: {} problem(s)", sealfs_text::escape_path(&args.image), o.problems.len()),
    }
}

/// Arguments of `sealfs digest`.
#[derive(Args)]
pub struct DigestArgs {
    /// The image (sealed or plain), where to read it from, and what vouches for it (`--digest`,
    /// `--key`: with `--files`, the per-file digests are then authenticated too).
    #[command(flatten)]
    image: crate::open::ImageArgs,
    /// Hash algorithm for a plain image (a sealed one uses its seal's).
    #[arg(long, value_name = "ALG", value_parser = ["sha256", "sha512"])]
    hash_alg: Option<String>,
    /// Print the fs-verity digest of every regular file instead, one `DIGEST PATH` line per path
    /// (as `fsverity digest` prints them), from the image's own per-file digest table, which the
    /// image digest covers (computed from the verified content when the image has none). Compare
    /// with `cd TREE && find . -type f -printf '%P\0' | sort -z | xargs -0 fsverity digest`. Exit 4
    /// when the digests printed come from an older seal's trailer, which nothing authenticates.
    #[arg(long)]
    files: bool,
    /// With `--files`: compute every file's digest from its verified content, ignoring what the
    /// image records (authenticated digests for images sealed before the table moved into them).
    #[arg(long, requires = "files")]
    from_content: bool,
    /// With `--files`: `text` (`DIGEST PATH` lines), or `ipe`: rules of an IPE (Integrity Policy
    /// Enforcement) policy allowing exactly these files, by fs-verity digest, to run once extracted
    /// with `sealfs extract --fsverity`.
    #[arg(long, value_name = "FORMAT", default_value = "text", value_parser = ["text", "ipe"], requires = "files")]
    format: String,
    /// With `--files`: print one JSON object (the trust established, where the digests came from,
    /// and every file).
    #[arg(long, requires = "files", conflicts_with = "format")]
    json: bool,
}

/// Exit code of `digest --files` when the digests printed are not covered by the image digest.
pub const EXIT_UNAUTHENTICATED_FILES: u8 = 4;

/// Runs `sealfs digest`: computes the fs-verity digest of the EROFS bytes (what `fsverity digest` prints
/// for them) from the bytes themselves; for a sealed image, a digest different from the seal's is an error.
/// Given `--digest`, `--key`/`--keyring` or `--min-version` (or a registry reference pinned by
/// digest), the image is checked against them as `verify` checks it, and the digest printed only
/// when it passes (exit 1 otherwise). With `--files`, the per-file digests (see
/// [`DigestArgs::files`]).
pub fn run_digest(args: DigestArgs) -> Result<ExitCode> {
    let plain_alg: HashAlg = args.hash_alg.as_deref().unwrap_or("sha256").parse()?;
    if args.files {
        return run_file_digests(&args, plain_alg);
    }
    let progress = TermProgress::new(false);
    if trust_given(&args.image) {
        return digest_checked(&args, &progress);
    }
    let given = args
        .image
        .sidecar
        .as_deref()
        .map(|p| location(p, &args.image.tls))
        .transpose()?;
    // An image in a registry: its blob (and a detached artifact's seal) by range.
    let (image, sidecar) = match crate::open::registry_sources(&args.image.image, &args.image.tls)?
    {
        Some((image, found, _)) => (image, given.or(found)),
        None => (location(&args.image.image, &args.image.tls)?, given),
    };
    let result = check::image_digest(image, sidecar.as_ref(), plain_alg, &progress).map(|r| {
        println!("{}", r.digest);
        match r.sealed {
            Some(claimed) if claimed != r.digest => {
                eprintln!(
                    "sealfs: error: {}: the seal names {claimed}, but the bytes hash to {}",
                    sealfs_text::escape_path(&args.image.image),
                    r.digest
                );
                ExitCode::from(EXIT_IMAGE)
            }
            _ => ExitCode::SUCCESS,
        }
    });
    match result {
        Ok(code) => Ok(code),
        Err(OpenError::Seal(what)) => {
            eprintln!("sealfs: error: {what}");
            Ok(ExitCode::from(EXIT_IMAGE))
        }
        Err(e) => Err(anyhow::Error::new(e)),
    }
}

/// Whether `digest` was told what the image must be: `--digest`, `--key`, `--keyring`,
/// `--min-version`, or a registry reference pinned by digest (`@sha256:...`).
fn trust_given(image: &crate::open::ImageArgs) -> bool {
    let pinned = image
        .registry_ref()
        .and_then(|r| r.parse::<sealfs_registry::ImageRef>().ok())
        .is_some_and(|r| r.digest.is_some());
    image.digest.is_some()
        || !image.keys.key.is_empty()
        || image.keys.keyring.is_some()
        || image.keys.min_version.is_some()
        || pinned
}

/// `sealfs digest` with trust options: every byte checked as `verify` checks it; the digest is
/// printed only for an image that is what the options say (exit 0), else each problem is named
/// (exit 1).
fn digest_checked(args: &DigestArgs, progress: &TermProgress) -> Result<ExitCode> {
    let (digest, keys, min_version) =
        match parse_expected(args.image.digest.as_deref(), &args.image.keys) {
            Ok(x) => x,
            Err(code) => return Ok(code),
        };
    let expected = Expected {
        image: &args.image.image,
        digest,
        keys,
        min_version,
        sidecar: args.image.sidecar.as_deref(),
        signatures: args.image.keys.signatures.as_deref(),
        tls: &args.image.tls,
        max_problems: 20,
    };
    let outcome = match check_image(expected, progress) {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    let name = args.image.image.display();
    match (outcome.is_verified(), outcome.digest) {
        (true, Some(d)) => {
            println!("{d}");
            Ok(ExitCode::SUCCESS)
        }
        _ => {
            for p in &outcome.problems {
                match p {
                    Problem::Trailer(what) => eprintln!("sealfs: error: {what}"),
                    _ => eprintln!("sealfs: error: {name}: {p}"),
                }
            }
            if outcome.problems.is_empty() {
                eprintln!("sealfs: error: {name}: no digest could be computed");
            }
            Ok(ExitCode::from(EXIT_IMAGE))
        }
    }
}

/// `sealfs digest --files`: the image opened as every reading command opens it (verified, with
/// `--digest`/`--key` authenticated), then one line per path, an IPE fragment, or JSON.
fn run_file_digests(args: &DigestArgs, plain_alg: HashAlg) -> Result<ExitCode> {
    use std::io::Write;
    let opened = args.image.open()?;
    let list = check::file_digests(&opened, plain_alg, args.from_content)
        .map_err(crate::open::open_error)?;
    let name = sealfs_text::escape_path(&args.image.image);
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if args.json {
        let mut v = serde_json::json!({
            "trust": list.trust.to_string(),
            "authenticated": list.trust.is_authenticated(),
            "file_digests": list.origin.name(),
            "file_digests_authenticated": list.is_authenticated(),
            "files": list.lines.iter().map(|(p, d)| {
                let mut f = serde_json::json!({"digest": d.to_string()});
                sealfs_text::json_insert(&mut f, "path", p);
                f
            }).collect::<Vec<_>>(),
        });
        sealfs_text::json_insert(&mut v, "image", args.image.image.as_os_str().as_bytes());
        writeln!(out, "{v}")?;
    } else if args.format == "ipe" {
        let digest = list.trust.digest().map_or("-".into(), |d| d.to_string());
        writeln!(
            out,
            "# IPE rules allowing the regular files of {name} (image {digest}), by fs-verity digest;"
        )?;
        writeln!(
            out,
            "# for files extracted with `sealfs extract --fsverity`. Put them in a policy after its"
        )?;
        writeln!(
            out,
            "# `policy_name=... policy_version=...` line and DEFAULT rules."
        )?;
        let mut seen = std::collections::BTreeSet::new();
        for (_, d) in &list.lines {
            if seen.insert(d.to_string()) {
                writeln!(out, "op=EXECUTE fsverity_digest={d} action=ALLOW")?;
            }
        }
    } else {
        // One line per path, the path escaped so that no name can end a line or spoof one.
        for (path, d) in &list.lines {
            writeln!(out, "{d} {}", sealfs_text::Escaped(path))?;
        }
    }
    out.flush().map_err(|e| anyhow!(e))?;
    drop(out);
    use sealfs_reader::DigestOrigin;
    match list.origin {
        DigestOrigin::Trailer => {
            eprintln!(
                "sealfs: warning: {name}: UNAUTHENTICATED per-file digests: they come from the seal's trailer (written by a release before they moved into the image), which no digest or signature covers; `--from-content` computes them from the verified content"
            );
            return Ok(ExitCode::from(EXIT_UNAUTHENTICATED_FILES));
        }
        DigestOrigin::Computed if !args.from_content && !args.json => eprintln!(
            "sealfs: note: {name}: the image records no per-file digests; computed from its content"
        ),
        _ => {}
    }
    if !list.trust.is_authenticated() && !args.json {
        eprintln!(
            "sealfs: note: {name}: {}; give --digest or --key to authenticate these digests",
            list.trust
        );
    }
    Ok(ExitCode::SUCCESS)
}
