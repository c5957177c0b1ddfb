//! `sealfs cache stats|prune|verify`: the persistent cache of verified blocks
//! ([`sealfs_cache::DiskCache`]) that remote images are read through.

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;

/// Where the cache is and how big it may grow (every command that reads remote images takes these).
#[derive(Args, Clone, Debug)]
pub struct CacheArgs {
    /// The cache directory [default: $SEALFS_CACHE_DIR, $XDG_CACHE_HOME/sealfs or ~/.cache/sealfs].
    #[arg(long, value_name = "DIR", global = true)]
    pub cache_dir: Option<PathBuf>,
    /// The most the cache may take on disk (bytes; K, M, G suffixes) [default: 2G].
    #[arg(long, value_name = "SIZE", value_parser = parse_size, global = true)]
    pub cache_size: Option<u64>,
}

impl CacheArgs {
    /// The cache directory.
    pub fn dir(&self) -> PathBuf {
        self.cache_dir
            .clone()
            .unwrap_or_else(sealfs_cache::default_dir)
    }

    /// The library's settings for these arguments.
    pub fn settings(&self) -> sealfs_remote::CacheSettings {
        sealfs_remote::CacheSettings {
            dir: self.dir(),
            max_bytes: self.cache_size.unwrap_or(sealfs_cache::DEFAULT_MAX_BYTES),
        }
    }

    /// Opens (creating) the cache directory.
    pub fn open(&self) -> Result<sealfs_cache::DiskCache> {
        let dir = self.dir();
        sealfs_cache::DiskCache::open(
            &dir,
            self.cache_size.unwrap_or(sealfs_cache::DEFAULT_MAX_BYTES),
        )
        .with_context(|| format!("cache directory {}", sealfs_text::escape_path(&dir)))
    }
}

/// `1234`, `64K`, `512M`, `2G` (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let (num, mul) = match s.as_bytes().last() {
        Some(b'K' | b'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some(b'M' | b'm') => (&s[..s.len() - 1], 1 << 20),
        Some(b'G' | b'g') => (&s[..s.len() - 1], 1 << 30),
        Some(b'T' | b't') => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mul))
        .ok_or_else(|| {
            format!(
                "{}: expected bytes, with an optional K, M, G or T suffix",
                sealfs_text::escape(s.as_bytes())
            )
        })
}

/// Arguments of `sealfs cache`.
#[derive(Args)]
pub struct CacheCmd {
    #[command(subcommand)]
    what: CacheWhat,
    #[command(flatten)]
    cache: CacheArgs,
    /// Print JSON.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand)]
enum CacheWhat {
    /// What each image has in the cache, and the total against the bound.
    Stats,
    /// Delete least recently used blocks until the cache is within its bound (or --to SIZE).
    Prune {
        /// Prune down to this size instead of the bound (0 empties the cache).
        #[arg(long, value_name = "SIZE", value_parser = parse_size)]
        to: Option<u64>,
    },
    /// Check every cached block against its image's tree; damaged ones are deleted (exit 1).
    Verify,
}

/// Runs `sealfs cache`.
pub fn run(args: CacheCmd) -> Result<ExitCode> {
    let cache = args.cache.open()?;
    match args.what {
        CacheWhat::Stats => {
            let (images, total) = cache.usage()?;
            if args.json {
                let list: Vec<_> = images
                    .iter()
                    .map(|i| json!({"digest": i.digest, "chunks": i.chunks, "blocks": i.blocks, "bytes": i.bytes}))
                    .collect();
                println!(
                    "{}",
                    serde_json::to_string_pretty(&json!({
                        "dir": cache.dir().display().to_string(),
                        "bytes": total,
                        "max_bytes": cache.max_bytes(),
                        "images": list,
                    }))?
                );
            } else {
                println!(
                    "cache {}: {total} of {} bytes",
                    sealfs_text::escape_path(cache.dir()),
                    cache.max_bytes()
                );
                for i in images {
                    println!("{}  {} blocks  {} bytes", i.digest, i.blocks, i.bytes);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        CacheWhat::Prune { to } => {
            let p = cache.prune(to.unwrap_or(cache.max_bytes()))?;
            if args.json {
                println!(
                    "{}",
                    json!({"removed_chunks": p.chunks, "freed_bytes": p.bytes, "bytes": p.left})
                );
            } else {
                println!(
                    "freed {} bytes ({} chunks); {} bytes left",
                    p.bytes, p.chunks, p.left
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        CacheWhat::Verify => {
            let checked = cache.verify()?;
            let mut bad = false;
            for c in &checked {
                bad |= c.damaged > 0 || c.error.is_some();
                if !args.json {
                    match &c.error {
                        Some(e) => println!("{}: cannot check: {e}", c.digest),
                        None => println!(
                            "{}: {} blocks verified, {} damaged (deleted), {} not checkable here",
                            c.digest, c.verified, c.damaged, c.unverifiable
                        ),
                    }
                }
            }
            if args.json {
                let list: Vec<_> = checked
                    .iter()
                    .map(|c| json!({"digest": c.digest, "verified": c.verified, "damaged": c.damaged, "unverifiable": c.unverifiable, "error": c.error}))
                    .collect();
                println!("{}", serde_json::to_string_pretty(&list)?);
            }
            Ok(ExitCode::from(if bad { 1 } else { 0 }))
        }
    }
}
