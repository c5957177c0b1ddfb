//! `sealfs diff OLD... NEW`: what an update of NEW from OLD would fetch ([`sealfs_delta::plan`]).

use anyhow::{anyhow, Result};
use clap::Args;
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `sealfs diff`.
#[derive(Args)]
#[command(
    after_help = "Only NEW's Merkle tree and seal are fetched (about 1/128 of the image), and the tree \
is checked from NEW's digest down (--digest, --key) before any of its hashes is used. A block of \
NEW whose hash (under NEW's salt) is the hash of a block of an OLD image, or of a block the \
persistent cache holds for another image (unless --no-cache), need not be fetched; the others \
are fetched in requests that join runs at most 64 KiB apart, each at most 2 MiB, as the remote \
reads do."
)]
pub struct DiffArgs {
    /// The images already here (files, or block devices holding one).
    #[arg(required = true, num_args = 1.., value_name = "OLD")]
    old: Vec<PathBuf>,
    /// The new version: a path, a URL or an `oci://` reference, and what vouches for it.
    #[command(flatten)]
    new: crate::open::ImageArgs,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Also list the files NEW changes, adds and removes against the first OLD (as `diff -rq
    /// --no-dereference` of the two trees lists them), from the per-file digests both images
    /// record: NEW's metadata and digest table are read too.
    #[arg(long)]
    files: bool,
    /// Also say where NEW's blocks and those to fetch are: data of files kept or changed (against
    /// the first OLD, as --files finds them), directories, the packed inode (fragments), the
    /// metabox, other metadata (inodes, inline tails, the digest table). Reads NEW's metadata.
    #[arg(long)]
    regions: bool,
}

/// Runs `sealfs diff`.
pub fn run(args: DiffArgs) -> Result<ExitCode> {
    let opened = args.new.open()?;
    let name = sealfs_text::escape_path(&args.new.image);
    let seal = opened
        .seal
        .as_deref()
        .ok_or_else(|| anyhow!("{name}: the image is not sealed: it has no tree to compare"))?;
    let mut bases = sealfs_delta::Bases::index(&args.old, &seal.info().params)?;
    let cached = args
        .new
        .add_cached_leaves(&mut bases, &seal.info().params)?;
    let plan = sealfs_delta::plan(&name, seal, opened.image_length, &bases)?;
    let remote = sealfs_remote::RemoteOptions::default();
    let (gap, max) = (remote.coalesce_gap, remote.max_request_bytes);
    let requests = plan.requests(gap, max).len();
    let fetch_bytes = plan.fetch_bytes(gap, max);
    let (blocks, fetch_blocks) = (plan.data_blocks, plan.fetch_blocks());
    let changes = if args.files || args.regions {
        let old = sealfs_reader::open(args.old[0].clone(), &sealfs_reader::OpenOptions::new())
            .map_err(crate::open::open_error)?;
        Some(sealfs_delta::file_changes(&old, &opened).map_err(|e| anyhow!("{e}"))?)
    } else {
        None
    };
    let regions = if args.regions {
        let regions = sealfs_delta::regions(&opened, changes.as_ref(), plan.block_size)
            .map_err(|e| anyhow!("{name}: {e}"))?;
        Some(sealfs_delta::count_by_region(&regions, &plan.fetch))
    } else {
        None
    };
    let changes = changes.filter(|_| args.files);
    if args.json {
        let olds: Vec<_> = args
            .old
            .iter()
            .map(|p| serde_json::Value::Object(sealfs_text::json_path("path", p)))
            .collect();
        let mut out = json!({
            "bases": olds,
            "block_size": plan.block_size,
            "data_blocks": blocks,
            "reused_blocks": plan.reused_blocks,
            "cache_blocks": cached,
            "fetch_blocks": fetch_blocks,
            "fetch_runs": plan.fetch.iter().map(|r| [r.start, r.end]).collect::<Vec<_>>(),
            "seal_bytes": plan.seal_bytes,
            "fetch_bytes": fetch_bytes,
            "requests": requests,
            "image_length": plan.image_length,
        });
        for (k, v) in sealfs_text::json_path("image", &args.new.image) {
            out[k] = v;
        }
        if let Some(c) = &changes {
            let list = |paths: &[Vec<u8>]| -> Vec<serde_json::Value> {
                paths
                    .iter()
                    .map(|p| serde_json::Value::Object(sealfs_text::json_bytes("path", p)))
                    .collect()
            };
            out["changed"] = list(&c.changed).into();
            out["added"] = list(&c.added).into();
            out["removed"] = list(&c.removed).into();
        }
        if let Some(r) = &regions {
            let mut by = serde_json::Map::new();
            for &(region, n, fetch) in r {
                by.insert(
                    region.name().into(),
                    json!({"blocks": n, "fetch_blocks": fetch}),
                );
            }
            out["regions"] = by.into();
        }
        println!("{out}");
        return Ok(ExitCode::SUCCESS);
    }
    let pct = |a: u64, b: u64| {
        if b == 0 {
            0.0
        } else {
            a as f64 * 100.0 / b as f64
        }
    };
    println!(
        "{name}: {blocks} blocks of {} bytes; {} found in the {} image{} given ({:.1}%)",
        plan.block_size,
        plan.reused_blocks,
        args.old.len(),
        if args.old.len() == 1 { "" } else { "s" },
        pct(plan.reused_blocks, blocks)
    );
    println!(
        "fetch: {fetch_blocks} blocks in {requests} request{} ({} bytes, with the blocks between runs they join), and the tree and seal ({} bytes): {} of {} bytes ({:.1}%)",
        if requests == 1 { "" } else { "s" },
        fetch_bytes - plan.seal_bytes,
        plan.seal_bytes,
        fetch_bytes,
        plan.image_length,
        pct(fetch_bytes, plan.image_length)
    );
    for &(region, n, fetch) in regions.iter().flatten() {
        println!("{}: {n} blocks, {fetch} to fetch", region.name());
    }
    if let Some(c) = &changes {
        for (what, paths) in [
            ("changed", &c.changed),
            ("added", &c.added),
            ("removed", &c.removed),
        ] {
            for p in paths.iter() {
                println!("{what} /{}", sealfs_text::escape(p));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
