//! `sealfs digest` and `sealfs verify`: re-hash the EROFS bytes and check them against the seal (the
//! engine is [`sealfs_reader::check`]; this parses, prints and picks exit codes).

use crate::open::location;
use crate::progress::TermProgress;
use anyhow::{anyhow, Result};
use clap::Args;
use sealfs_reader::check::{self, CheckOptions, Problem, Report};
use sealfs_reader::OpenError;
use sealfs_verity::{Digest, HashAlg};
use std::path::PathBuf;
use std::process::ExitCode;

/// A problem as a JSON object with a `kind` and its coordinates.
fn problem_json(p: &Problem) -> serde_json::Value {
    let message = p.to_string();
    match p {
        Problem::DataBlock {
            index,
            block_size,
            owner,
        } => {
            serde_json::json!({"kind": "data_block", "block": index, "block_size": block_size, "offset": index * block_size, "owner": owner, "message": message})
        }
        Problem::FileDigest { path, .. } => {
            serde_json::json!({"kind": "file_digest", "path": path, "message": message})
        }
        Problem::TreeBlock { level, index } => {
            serde_json::json!({"kind": "tree_block", "level": level, "index": index, "message": message})
        }
        Problem::Trailer(_) => serde_json::json!({"kind": "trailer", "message": message}),
        Problem::Signature(_) => serde_json::json!({"kind": "signature", "message": message}),
        Problem::Digest { expected, actual } => {
            serde_json::json!({"kind": "digest", "expected": expected.to_string(), "actual": actual.to_string(), "message": message})
        }
    }
}

/// Arguments of `sealfs verify`.
#[derive(Args)]
pub struct VerifyArgs {
    /// The image: a path or an `http://`, `https://` or `s3://` URL.
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

/// Runs `sealfs verify`: exit 0 verified, 1 mismatch, 2 could not run.
pub fn run_verify(args: VerifyArgs) -> Result<ExitCode> {
    let progress = TermProgress::new(args.json);
    let expected: Option<Digest> =
        match args.digest.as_deref().map(str::parse::<Digest>).transpose() {
            Ok(d) => d,
            Err(e) => {
                eprintln!("sealfs: error: --digest: {e}");
                return Ok(ExitCode::from(2));
            }
        };
    let keys = match args.keys.load() {
        Ok(k) => k,
        Err(e) => {
            eprintln!("sealfs: error: {e:#}");
            return Ok(ExitCode::from(2));
        }
    };
    let sources = (|| -> Result<_> {
        Ok((
            location(&args.image, &args.tls)?,
            args.sidecar
                .as_deref()
                .map(|p| location(p, &args.tls))
                .transpose()?,
            match args.keys.signatures.as_deref() {
                Some(p) => Some(location(p, &args.tls)?),
                // Keys and a URL: `URL.sig` when the server has it, as `IMAGE.sig` beside a file.
                None if !keys.is_empty() => args
                    .image
                    .to_str()
                    .filter(|u| sealfs_remote::is_remote(u))
                    .map(|u| sealfs_remote::detached_signatures(u, &args.tls.remote_options()))
                    .transpose()?
                    .flatten(),
                None => None,
            },
        ))
    })();
    let (image, sidecar, signatures) = match sources {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sealfs: error: {e:#}");
            return Ok(ExitCode::from(2));
        }
    };
    let options = CheckOptions {
        digest: expected,
        sidecar,
        keys,
        signatures,
        max_problems: args.max_problems,
    };
    let outcome = match check::check(image, &options, &progress) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("sealfs: error: {:#}", anyhow::Error::new(e));
            return Ok(ExitCode::from(2));
        }
    };
    for note in &outcome.notes {
        eprintln!("sealfs: note: {note}");
    }
    report(&args, &outcome);
    Ok(if outcome.is_verified() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn report(args: &VerifyArgs, o: &Report) {
    let ok = o.problems.is_empty();
    if args.json {
        let v = serde_json::json!({
            "image": args.image.display().to_string(),
            "verified": ok,
            "sealed": o.sealed,
            "authenticated": ok && o.authenticated,
            "signed_by": o.signed_by.map(|f| f.to_string()),
            "digest": o.digest.map(|d| d.to_string()),
            "problems": o.problems.iter().map(problem_json).collect::<Vec<_>>(),
        });
        println!("{v}");
        return;
    }
    for p in &o.problems {
        match p {
            Problem::Trailer(what) => eprintln!("{what}"),
            Problem::Signature(_) => eprintln!("{}: {p}", args.image.display()),
            _ => eprintln!("{}: {p}", args.image.display()),
        }
    }
    let digest = o.digest.map_or("-".to_string(), |d| d.to_string());
    match (ok, o.authenticated) {
        (true, true) if o.signed_by.is_some() => println!(
            "{}: verified {digest}: authenticated: signed by {}{}",
            args.image.display(),
            o.signed_by.expect("checked"),
            if args.digest.is_some() { " (and matches --digest)" } else { "" }
        ),
        (true, true) => println!("{}: verified {digest}: authenticated (matches --digest)", args.image.display()),
        (true, false) => println!(
            "{}: self-consistent {digest}: every block matches the seal, but the seal is not authenticated (give --digest)",
            args.image.display()
        ),
        (false, _) => println!("{}: FAILED: {} problem(s)", args.image.display(), o.problems.len()),
    }
}

/// Arguments of `sealfs digest`.
#[derive(Args)]
pub struct DigestArgs {
    /// The image (sealed or plain): a path or an `http://`, `https://` or `s3://` URL.
    image: PathBuf,
    /// Read the seal from this sidecar file (a path or a URL).
    #[arg(long, value_name = "PATH")]
    sidecar: Option<PathBuf>,
    /// Hash algorithm for a plain image (a sealed one uses its seal's).
    #[arg(long, value_name = "ALG", value_parser = ["sha256", "sha512"])]
    hash_alg: Option<String>,
    /// Print the fs-verity digest of every regular file instead, one `DIGEST PATH` line per path
    /// (as `fsverity digest` prints them), from the digests recorded in the seal. Compare with
    /// `cd TREE && find . -type f -printf '%P\0' | sort -z | xargs -0 fsverity digest`.
    #[arg(long)]
    files: bool,
    #[command(flatten)]
    tls: crate::open::TlsArgs,
}

/// Runs `sealfs digest`: computes the fs-verity digest of the EROFS bytes (what `fsverity digest` prints
/// for them) from the bytes themselves; for a sealed image, a digest different from the seal's is an error.
pub fn run_digest(args: DigestArgs) -> Result<ExitCode> {
    let progress = TermProgress::new(false);
    let plain_alg: HashAlg = args.hash_alg.as_deref().unwrap_or("sha256").parse()?;
    let image = location(&args.image, &args.tls)?;
    let sidecar = args
        .sidecar
        .as_deref()
        .map(|p| location(p, &args.tls))
        .transpose()?;
    let result = if args.files {
        check::file_digests(image, sidecar.as_ref(), plain_alg)
            .map(|list| print_file_digests(&args, list))
    } else {
        check::image_digest(image, sidecar.as_ref(), plain_alg, &progress).map(|r| {
            println!("{}", r.digest);
            match r.sealed {
                Some(claimed) if claimed != r.digest => {
                    eprintln!(
                        "sealfs: error: {}: the seal names {claimed}, but the bytes hash to {}",
                        args.image.display(),
                        r.digest
                    );
                    Ok(ExitCode::from(1))
                }
                _ => Ok(ExitCode::SUCCESS),
            }
        })
    };
    match result {
        Ok(code) => code,
        Err(OpenError::Seal(what)) => {
            eprintln!("sealfs: error: {what}");
            Ok(ExitCode::from(1))
        }
        Err(e) => Err(anyhow::Error::new(e)),
    }
}

/// `sealfs digest --files`: one `DIGEST PATH` line per path.
fn print_file_digests(args: &DigestArgs, list: check::FileDigestList) -> Result<ExitCode> {
    use std::io::Write;
    if list.computed {
        eprintln!(
            "sealfs: note: {}: no recorded per-file digests; hashing every file",
            args.image.display()
        );
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for (path, d) in list.lines {
        write!(out, "{d} ")?;
        out.write_all(&path)?;
        out.write_all(b"\n")?;
    }
    out.flush().map_err(|e| anyhow!(e))?;
    Ok(ExitCode::SUCCESS)
}
