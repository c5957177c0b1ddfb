//! Issue 38 item 3, its second half: text output escapes every untrusted string by one rule, and
//! `--json` output stays exact. It did not: `digest --files --json`, `getfattr --json`,
//! `verify --json` and `inspect --json` wrote a name that is not UTF-8 with each invalid byte
//! as U+FFFD, so `bad\xff` and `bad\xfe` printed the same and no consumer could get the bytes back.
//! Now every JSON string carrying a name, path or xattr name follows one rule
//! (`sealfs_text::json_bytes`): the string when the bytes are UTF-8, else the lossy string plus
//! `KEY_hex`, the exact bytes in hex.
//!
//! The oracle is Python: `json.loads` of each output, the bytes recovered by the documented rule
//! (`bytes.fromhex(o["KEY_hex"])` when present, else `os.fsencode(o["KEY"])`), compared with what
//! `os.walk(b...)`, `os.readlink` and `os.getxattr` give on the source tree. Each output must also
//! be accepted by `python3 -m json.tool` and `jq`.

mod common;

use common::*;
use std::fs;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// File names: bytes 0x80–0xff that are not UTF-8 (two that collide once made lossy), a newline,
/// ESC, a quote, a backslash, and valid UTF-8 (which must print as it is).
const NAMES: &[&[u8]] = &[
    b"bad\xff",
    b"bad\xfe",
    b"lat1 r\xe9sum\xe9",
    b"cont\x80\x81\xbf",
    b"nl\nx",
    b"esc\x1b[31mred",
    b"quote\"s",
    b"back\\slash",
    "caf\u{e9}".as_bytes(),
];
/// The file whose data `verify` is shown damaged (its name is not UTF-8).
const VICTIM: &[u8] = b"bad\xff";
/// A directory (not UTF-8) and a file in it.
const DIR: &[u8] = b"dir\xe9";
const INNER: &[u8] = b"in\x80\n\"\\";
/// A symlink and its dangling target, neither UTF-8.
const LINK: &[u8] = b"link\xfe";
const TARGET: &[u8] = b"to\xff\n\x1b";
/// Xattrs on `bad\xff`: names that collide once made lossy, values not UTF-8.
const XATTRS: &[(&[u8], &[u8])] = &[
    (b"user.k\xff\n\x1b\"\\", b"v\xfe\x00\"\\\n"),
    (b"user.k\xfe\n\x1b\"\\", b"\x80"),
    (b"user.plain", b"text"),
];

fn os(bytes: &[u8]) -> std::ffi::OsString {
    std::ffi::OsString::from_vec(bytes.to_vec())
}

fn sealfs() -> Command {
    let mut c = Command::new(sealfs_bin());
    c.stdin(Stdio::null()).env("TZ", "UTC");
    c
}

fn make_source(src: &Path) {
    fs::create_dir_all(src).unwrap();
    for (i, name) in NAMES.iter().enumerate() {
        let data = if *name == VICTIM {
            Rng::new(381).bytes(64 << 10)
        } else {
            format!("file {i}\n").into_bytes()
        };
        fs::write(src.join(os(name)), data).unwrap();
    }
    fs::create_dir(src.join(os(DIR))).unwrap();
    fs::write(src.join(os(DIR)).join(os(INNER)), b"inner\n").unwrap();
    std::os::unix::fs::symlink(os(TARGET), src.join(os(LINK))).unwrap();
    for (n, v) in XATTRS {
        xattr::set(src.join(os(VICTIM)), os(n), v).expect("user xattr on the source");
    }
}

/// The Python oracle: `python3 -c ORACLE MODE SRC JSON [ARG]`; exits 0 when every name in the
/// JSON, recovered by the documented rule, is exactly what the source tree holds.
const ORACLE: &str = r#"
import json, os, stat, sys
mode, src, out = sys.argv[1], os.fsencode(sys.argv[2]), sys.argv[3]
arg = os.fsencode(sys.argv[4]) if len(sys.argv) > 4 else None
text = open(out, 'rb').read().decode('utf-8')   # strict: JSON output is UTF-8

def exact(o, k):
    if k + '_hex' in o:
        return bytes.fromhex(o[k + '_hex'])
    return os.fsencode(o[k])

def tree():
    '''(rooted path, lstat) of every entry under src, root included, as os.walk gives them.'''
    found = [(b'/', os.lstat(src))]
    for top, dirs, files in os.walk(src):
        for n in dirs + files:
            p = os.path.join(top, n)
            found.append((b'/' + os.path.relpath(p, src), os.lstat(p)))
    return found

def user_xattrs(rooted):
    p = src + rooted
    return sorted((n, os.getxattr(p, n, follow_symlinks=False))
                  for n in (os.fsencode(x) for x in os.listxattr(p, follow_symlinks=False))
                  if n.startswith(b'user.'))

def check(what, got, want):
    if got != want:
        sys.exit('%s: got %r\n want %r' % (what, got, want))

if mode == 'digest':
    o = json.loads(text)
    check('image', exact(o, 'image'), arg)
    got = [exact(f, 'path') for f in o['files']]
    want = sorted(p[1:] for p, st in tree() if stat.S_ISREG(st.st_mode))
    check('digest --files paths', sorted(got), want)
    check('distinct', len(set(got)), len(got))
elif mode == 'getfattr':
    lines = [json.loads(l) for l in text.splitlines()]
    got = {exact(l, 'path'): sorted((exact(x, 'name'), bytes.fromhex(x['value_hex']))
                                    for x in l['xattrs'] if exact(x, 'name').startswith(b'user.'))
           for l in lines}
    check('getfattr lines', len(got), len(lines))
    want = {p: user_xattrs(p) for p, _ in tree()}
    check('getfattr', got, want)
elif mode == 'stat':
    o = json.loads(text)
    check('stat path', exact(o, 'path'), arg)
    st = os.lstat(src + arg)
    if stat.S_ISLNK(st.st_mode):
        check('stat symlink_target', exact(o, 'symlink_target'), os.readlink(src + arg))
    else:
        check('stat symlink_target', o['symlink_target'], None)
elif mode == 'verify':
    o = json.loads(text)
    check('image', exact(o, 'image'), arg)
    got = [exact(p, 'path') for p in o['problems'] if p['kind'] == 'file_digest']
    check('verify file_digest paths', got, [b'/' + os.fsencode(sys.argv[5])])
elif mode == 'inspect':
    o = json.loads(text)
    check('image', exact(o, 'image'), arg)
else:
    sys.exit('unknown mode ' + mode)
print('ok', mode)
"#;

/// Writes `json` to a file in `dir`, checks that `python3 -m json.tool` and `jq` accept it (each
/// line, for JSON Lines), and that the Python oracle recovers every name exactly.
fn oracle(dir: &Path, mode: &str, src: &Path, json: &[u8], args: &[&[u8]]) {
    let file = dir.join(format!("{mode}.json"));
    fs::write(&file, json).unwrap();
    for line in json.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let one = dir.join("line.json");
        fs::write(&one, line).unwrap();
        for cmd in [
            Command::new("python3").args(["-m", "json.tool"]).arg(&one),
            Command::new("jq").arg(".").arg(&one),
        ] {
            let o = cmd.output().expect("run the JSON checker");
            assert!(
                o.status.success(),
                "{mode}: {cmd:?} rejects {}: {}",
                String::from_utf8_lossy(line),
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
    let o = Command::new("python3")
        .arg("-c")
        .arg(ORACLE)
        .arg(mode)
        .arg(src)
        .arg(&file)
        .args(args.iter().map(|a| os(a)))
        .output()
        .expect("run python3");
    assert!(
        o.status.success(),
        "{mode}: the names in the JSON are not the source tree's exact bytes:\n{}\nJSON:\n{}",
        String::from_utf8_lossy(&o.stderr),
        String::from_utf8_lossy(json)
    );
}

fn stdout_of(cmd: &mut Command, code: i32) -> Vec<u8> {
    let o = run(cmd);
    assert_eq!(
        o.status.code(),
        Some(code),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o.stdout
}

#[test]
fn json_output_keeps_names_that_are_not_utf8_exact() {
    if !oracle_guard(need_tool("python3").and(need_tool("jq"))) {
        return;
    }
    let tmp = tempfile::Builder::new()
        .prefix("sealfs-json-exact-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let dir = tmp.path();
    let src = dir.join("src");
    make_source(&src);
    let image_name: &[u8] = b"image\xff\n\x1b.img";
    let image = dir.join(os(image_name));
    build_ok(&src, &image, &[]);
    let image_bytes = image.as_os_str().as_bytes();

    let out = stdout_of(
        sealfs().args(["digest", "--files", "--json"]).arg(&image),
        0,
    );
    oracle(dir, "digest", &src, &out, &[image_bytes]);

    let out = stdout_of(
        sealfs()
            .args(["getfattr", "--json", "-R", "-h"])
            .arg(&image)
            .arg("/"),
        0,
    );
    oracle(dir, "getfattr", &src, &out, &[]);

    for p in [
        &[b"/", VICTIM].concat(),
        &[b"/", LINK].concat(),
        &[b"/", DIR, b"/", INNER].concat(),
        &b"/nl\nx"[..],
    ] {
        let out = stdout_of(sealfs().args(["stat", "--json"]).arg(&image).arg(os(p)), 0);
        oracle(dir, "stat", &src, &out, &[p]);
    }

    let out = stdout_of(sealfs().args(["inspect", "--json"]).arg(&image), 0);
    oracle(dir, "inspect", &src, &out, &[image_bytes]);

    // A damaged copy: `verify --json` names the file whose digest fails.
    let bad = dir.join(os(b"bad\xfe\"\\.img"));
    fs::copy(&image, &bad).unwrap();
    let bytes = fs::read(&bad).unwrap();
    let data = Rng::new(381).bytes(64 << 10);
    let at = bytes
        .windows(4096)
        .position(|w| w == &data[..4096])
        .expect("the victim's data in the image")
        + 100;
    fs::File::options()
        .write(true)
        .open(&bad)
        .unwrap()
        .write_all_at(&[!bytes[at]], at as u64)
        .unwrap();
    let out = stdout_of(sealfs().args(["verify", "--json"]).arg(&bad), 1);
    oracle(
        dir,
        "verify",
        &src,
        &out,
        &[bad.as_os_str().as_bytes(), VICTIM],
    );
    println!("digest, getfattr, stat, inspect and verify --json carry every name exactly");
}
