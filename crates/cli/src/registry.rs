//! `sealfs push IMAGE REF` and `sealfs pull REF OUT`: images in OCI registries (the engine is
//! `sealfs-registry`; this maps flags and prints).

use crate::open::{ImageArgs, TlsArgs};
use crate::progress::TermProgress;
use anyhow::{anyhow, Result};
use clap::Args;
use sealfs_reader::check::Progress as _;
use sealfs_registry::push::{BlobOutcome, ReferrersVia};
use sealfs_registry::{ImageRef, PushOptions, RegistryError};
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `sealfs push`.
#[derive(Args)]
pub struct PushArgs {
    /// The sealed image to push (a path).
    image: PathBuf,
    /// Where: `oci://HOST[:PORT]/REPO[:TAG]` (HTTPS; `oci+http://` for plain HTTP; tag `latest` if
    /// none). Credentials: SEALFS_REGISTRY_USERNAME and SEALFS_REGISTRY_PASSWORD, the file
    /// REGISTRY_AUTH_FILE names, or docker's config.json.
    reference: String,
    /// The seal sidecar of a detached image (pushed as the artifact's second layer).
    #[arg(long, value_name = "PATH")]
    sidecar: Option<PathBuf>,
    /// A repository of the same registry to mount blobs from when this one lacks them (no upload);
    /// repeatable.
    #[arg(long, value_name = "REPO")]
    mount_from: Vec<String>,
    /// Do not attach the image's signatures (its seal and IMAGE.sig) as a referrer.
    #[arg(long)]
    no_signatures: bool,
    /// Blobs up to this size are uploaded in one request, larger ones in chunks of it (each
    /// resumable after a dropped connection).
    #[arg(long, value_name = "BYTES", default_value_t = sealfs_registry::client::DEFAULT_CHUNK_SIZE)]
    chunk_size: u64,
    #[command(flatten)]
    tls: TlsArgs,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

/// The exit code for a registry error: 1 when the registry served content other than what names
/// it, else 2.
fn registry_exit(e: &RegistryError) -> ExitCode {
    ExitCode::from(if e.is_content_fault() { 1 } else { 2 })
}

/// Runs `sealfs push`.
pub fn run_push(args: PushArgs) -> Result<ExitCode> {
    let target: ImageRef = args.reference.parse()?;
    let options = sealfs_registry::RegistryOptions {
        chunk_size: args.chunk_size.max(1),
        ..args.tls.registry_options()
    };
    let push = PushOptions {
        sidecar: args.sidecar.clone(),
        mount_from: args.mount_from.clone(),
        no_signatures: args.no_signatures,
        untagged: false,
    };
    let progress = TermProgress::new(args.json);
    let report = match sealfs_registry::push_image(&args.image, &target, &options, &push, &progress)
    {
        Ok(r) => r,
        Err(e) => {
            // With its causes (an image that fails to open says why), each said once.
            eprintln!("sealfs: error: {}", sealfs_reader::ErrorChain(&e));
            return Ok(registry_exit(&e));
        }
    };
    let outcome = |o: &BlobOutcome| match o {
        BlobOutcome::Present => "present".to_string(),
        BlobOutcome::Mounted { from } => format!("mounted from {from}"),
        BlobOutcome::Uploaded {
            requests,
            resumed,
            restarted,
        } => format!("uploaded ({requests} requests, {resumed} resumed, {restarted} restarted)"),
    };
    if args.json {
        let v = serde_json::json!({
            "reference": report.reference.to_string(),
            "manifest_digest": report.manifest_digest,
            "image_digest": report.facts.digest.to_string(),
            "blobs": report.blobs.iter().map(|b| serde_json::json!({
                "media_type": b.descriptor.media_type,
                "digest": b.descriptor.digest,
                "size": b.descriptor.size,
                "outcome": outcome(&b.outcome),
            })).collect::<Vec<_>>(),
            "signatures": report.signatures.as_ref().map(|s| serde_json::json!({
                "manifest_digest": s.manifest_digest,
                "count": s.count,
                "referrers": match &s.via { ReferrersVia::Api => "api".to_string(), ReferrersVia::Tag(t) => format!("tag {t}") },
            })),
        });
        println!("{v}");
        return Ok(ExitCode::SUCCESS);
    }
    for b in &report.blobs {
        eprintln!(
            "sealfs: {} {} ({} bytes): {}",
            b.descriptor.media_type,
            b.descriptor.digest,
            b.descriptor.size,
            outcome(&b.outcome)
        );
    }
    if let Some(s) = &report.signatures {
        eprintln!(
            "sealfs: {} signature(s) attached as {} ({})",
            s.count,
            s.manifest_digest,
            match &s.via {
                ReferrersVia::Api => "referrers API".to_string(),
                ReferrersVia::Tag(t) => format!("no referrers API: listed under the tag {t}"),
            }
        );
    }
    println!("{} {}", report.reference, report.facts.digest);
    Ok(ExitCode::SUCCESS)
}

/// Arguments of `sealfs pull`.
#[derive(Args)]
pub struct PullArgs {
    #[command(flatten)]
    image: ImageArgs,
    /// Where to write the image (it appears only once every block is verified).
    out: PathBuf,
    /// Where to write the seal of a detached image.
    #[arg(long = "sidecar-out", value_name = "PATH")]
    sidecar_out: Option<PathBuf>,
    /// Images already here (files, or block devices holding one): the blocks of the image found in
    /// them by their Merkle leaves are copied from them (each checked against the image's tree),
    /// only the others fetched (`sealfs diff` says how many). The blocks the persistent cache
    /// holds for other images are taken the same way (unless --no-cache). With it (or for an image that is not
    /// in a registry: a file, an http(s):// or s3:// URL), the image is written to a partial file
    /// beside OUT (`.NAME.sealfs-part`), kept when the pull fails or is killed, and taken as a
    /// base by the next pull to OUT: an interrupted update goes on from where it stopped.
    #[arg(long = "base", value_name = "OLD")]
    bases: Vec<PathBuf>,
    /// With --base (or an image not in a registry): print one JSON object (blocks reused, blocks
    /// and bytes fetched, requests made).
    #[arg(long)]
    json: bool,
}

/// The partial file of a pull to `out`, kept across interrupted runs.
fn partial_path(out: &std::path::Path) -> PathBuf {
    let name = out
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_else(|| "image".into());
    let mut part = std::ffi::OsString::from(".");
    part.push(name);
    part.push(".sealfs-part");
    out.with_file_name(part)
}

/// `sealfs pull` of any image from the bases given and its source ([`sealfs_delta::update`]).
fn run_pull_delta(args: PullArgs) -> Result<ExitCode> {
    let name = sealfs_text::escape_path(&args.image.image);
    if args.sidecar_out.is_some() {
        return Err(anyhow!(
            "{name}: --sidecar-out: pulling a detached image from bases is not done yet"
        ));
    }
    args.image.refuse_double()?;
    let options = args.image.options()?;
    if matches!(options.verify, sealfs_reader::VerifyMode::None) {
        return Err(anyhow!(
            "{name}: --verify=none: a pull checks every block it writes"
        ));
    }
    let opened = args.image.open()?;
    let seal = opened.seal.as_deref().ok_or_else(|| {
        anyhow!("{name}: the image is not sealed: nothing names its blocks to fetch or reuse")
    })?;
    if seal.is_detached() {
        return Err(anyhow!(
            "{name}: the image is detached (a plain EROFS image and its seal): pulling it from \
             bases is not done yet"
        ));
    }
    // A block device (an A/B slot) is written in place, and what it holds is one more base (the
    // image it held, or what an interrupted pull wrote); a file is written beside OUT first.
    let device = std::fs::metadata(&args.out)
        .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_block_device(&m.file_type()));
    let part = if device {
        args.out.clone()
    } else {
        partial_path(&args.out)
    };
    let mut bases = args.bases.clone();
    if part.exists() {
        bases.push(part.clone());
    }
    let mut index = sealfs_delta::Bases::index(&bases, &seal.info().params)?;
    args.image
        .add_cached_leaves(&mut index, &seal.info().params)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(!device)
        .truncate(false)
        .open(&part)
        .map_err(|e| anyhow!("{}: {e}", sealfs_text::escape_path(&part)))?;
    let remote = sealfs_remote::RemoteOptions::default();
    let fetch = sealfs_delta::FetchOptions {
        gap: remote.coalesce_gap,
        max_request: remote.max_request_bytes,
        in_flight: 4,
    };
    let progress = TermProgress::new(false);
    progress.begin("pull", Some(opened.image_length));
    let report = sealfs_delta::update(
        &name,
        seal,
        &**seal.source(),
        opened.image_length,
        &index,
        &file,
        &part,
        fetch,
        &|n| progress.advance(n),
    );
    progress.end();
    let report = report?;
    file.sync_all()
        .map_err(|e| anyhow!("{}: {e}", sealfs_text::escape_path(&part)))?;
    // The image's bytes of it (a device goes on past them).
    let written = sealfs_reader::Source::reader(
        std::sync::Arc::new(sealfs_reader::SubRange::new(file, 0, opened.image_length)),
        part.display().to_string(),
    );
    // The whole file, checked as `sealfs verify` checks it, against what the open established.
    let check = sealfs_reader::check::CheckOptions {
        digest: opened.trust.digest().copied(),
        keys: options.keys.clone(),
        signatures: options.signatures.clone(),
        min_version: options.min_version.clone(),
        sidecar: None,
        max_problems: 20,
    };
    let checked = sealfs_reader::check::check(written, &check, &progress)?;
    if !checked.problems.is_empty() {
        let list: Vec<String> = checked.problems.iter().map(|p| p.to_string()).collect();
        return Err(anyhow::Error::new(crate::read::ImageFault(format!(
            "{name}: the pulled file does not verify: {}",
            list.join("; ")
        ))));
    }
    if !device {
        std::fs::rename(&part, &args.out)
            .map_err(|e| anyhow!("{}: {e}", sealfs_text::escape_path(&args.out)))?;
    }
    let digest = checked.digest.map_or("-".into(), |d| d.to_string());
    if args.json {
        let mut out = serde_json::json!({
            "digest": digest,
            "bytes": opened.image_length,
            "data_blocks": report.plan.data_blocks,
            "planned_reuse_blocks": report.plan.reused_blocks,
            "reused_blocks": report.reused_blocks,
            "cache_reused_blocks": report.cache_reused_blocks,
            "base_mismatches": report.base_mismatches,
            "fetched_blocks": report.fetched_blocks,
            "fetched_bytes": report.fetched_bytes,
            "requests": report.requests,
            "trust": opened.trust.to_string(),
        });
        for (k, v) in sealfs_text::json_path("out", &args.out) {
            out[k] = v;
        }
        println!("{out}");
    } else {
        if report.base_mismatches > 0 {
            eprintln!(
                "sealfs: {} block(s) of the bases did not match the image's tree (changed or damaged since they were hashed): fetched instead",
                report.base_mismatches
            );
        }
        println!(
            "{} {digest} ({} bytes, {}): {} blocks reused, {} fetched ({} bytes in {} requests)",
            sealfs_text::escape_path(&args.out),
            opened.image_length,
            opened.trust,
            report.reused_blocks,
            report.fetched_blocks,
            report.fetched_bytes,
            report.requests
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `sealfs pull`.
pub fn run_pull(args: PullArgs) -> Result<ExitCode> {
    if !args.bases.is_empty() || args.image.registry_ref().is_none() {
        return run_pull_delta(args);
    }
    args.image.refuse_double()?;
    let (opened, _, located) = args.image.open_located()?;
    let found = located.ok_or_else(|| anyhow!("not in a registry"))?;
    // The file is checked against what the open established: the expected digest (given, or
    // brought by a pinned reference), or the keys, the signatures found and the version floor.
    let used = &found.options;
    let check = sealfs_reader::check::CheckOptions {
        digest: used.digest,
        keys: used.keys.clone(),
        signatures: used.signatures.clone(),
        min_version: used.min_version.clone(),
        sidecar: None,
        max_problems: 20,
    };
    let progress = TermProgress::new(false);
    match sealfs_registry::pull(
        &opened,
        &found,
        &args.out,
        args.sidecar_out.as_deref(),
        check,
        &progress,
    ) {
        Ok(report) => {
            println!(
                "{} {} ({} bytes, {})",
                sealfs_text::escape_path(&report.out),
                report.check.digest.map_or("-".into(), |d| d.to_string()),
                report.bytes,
                opened.trust
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("sealfs: error: {e}");
            Ok(registry_exit(&e))
        }
    }
}
