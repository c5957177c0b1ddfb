//! Property test: random trees (names of raw bytes, all file types, hard links, modes, owners,
//! mtimes, xattrs; see `common::randtree`) built with default options read back through the
//! kernel exactly as they are in the source; the xattr filter answers through the kernel; and
//! `fsck.erofs` accepts every image.
//!
//! 24 cases by default; `PROPTEST_CASES=N` changes that. Failing cases are shrunk (proptest's
//! default) and the minimal tree is printed.

mod common;

use common::compare::{check_xattr_filter, compare_trees, Expect};
use common::randtree::{materialize, tree_strategy, TreeDesc};
use common::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::cell::Cell;
use std::fs;

fn one_case(tmp: &Tmpfs, n: usize, desc: &TreeDesc) -> Result<(), TestCaseError> {
    let dir = tmp.join(format!("case{n}"));
    fs::create_dir(&dir).unwrap();
    let src = dir.join("src");
    fs::create_dir(&src).unwrap();
    let result = (|| {
        materialize(desc, &src)
            .map_err(|e| TestCaseError::fail(format!("materializing the tree (test bug?): {e}")))?;
        let image = dir.join("img.erofs");
        let out = run(&mut build_cmd(&src, &image, &[]));
        if !out.status.success() {
            return Err(TestCaseError::fail(format!(
                "build failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        fsck(&image).map_err(TestCaseError::fail)?;
        let mnt = mount_erofs(&image).map_err(TestCaseError::fail)?;
        let scanned = common::compare::scan_tree(&src, &|_| false).map_err(TestCaseError::fail)?;
        let xattrs: usize = scanned
            .values()
            .map(|n| n.xattrs.as_ref().map_or(0, |x| x.len()))
            .sum();
        println!(
            "case {n}: {} paths, {xattrs} xattrs, image {} bytes",
            scanned.len(),
            fs::metadata(&image).map(|m| m.len()).unwrap_or(0)
        );
        let mut problems = compare_trees(&src, mnt.path(), &Expect::default());
        problems.extend(check_xattr_filter(mnt.path()).0);
        if !problems.is_empty() {
            problems.truncate(40);
            return Err(TestCaseError::fail(problems.join("\n")));
        }
        Ok(())
    })();
    fs::remove_dir_all(&dir).unwrap();
    result
}

#[test]
fn random_trees_round_trip_through_the_kernel() {
    if !oracle_guard(mount_env()) {
        return;
    }
    let cases: u32 = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    let tmp = Tmpfs::new("proptest").expect("tmpfs");
    let counter = Cell::new(0usize);
    let passed = Cell::new(0usize);
    let mut runner = TestRunner::new(config);
    let result = runner.run(&tree_strategy(), |desc| {
        let n = counter.get();
        counter.set(n + 1);
        one_case(&tmp, n, &desc)?;
        passed.set(passed.get() + 1);
        Ok(())
    });
    println!(
        "{} cases run ({} passed, the rest are shrinking steps), {cases} required",
        counter.get(),
        passed.get()
    );
    if let Err(e) = result {
        panic!("random tree round trip failed: {e}");
    }
    assert!(
        passed.get() >= cases as usize,
        "fewer cases passed than configured"
    );
}
