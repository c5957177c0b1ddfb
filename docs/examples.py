#!/usr/bin/env python3
"""Regenerates the worked examples of docs/format.md from real runs.

    python3 docs/examples.py [--sealfs BIN]          rewrites docs/format.md
    python3 docs/examples.py --check [--sealfs BIN]  exits 1 (printing a diff) if it differs

The §13 image is built with the commands §13.1 shows, by the sealfs binary given (default
target/release/sealfs), in a temporary directory; every value below comes from a program run on
it (sealfs, xxd, tail, head, sha256sum, fsverity), never from this script's own arithmetic:

- blocks between `<!-- examples.py: NAME -->` and `<!-- /examples.py -->` are replaced whole by
  what NAME's run prints (the §13.1 build and its digest, the §10.1 statement, the §13.3 footer
  dump, the §13.4 descriptor hash, the §13.6 file digests);
- in the annotated dumps (the code blocks of §13.4 and §13.6), the hex of every `OFFSET: HEX`
  line is rewritten with the image's bytes at OFFSET, as many as the line shows; the
  annotations are left as they are;
- the numbers and abbreviated hashes of FACTS, in the prose, are rewritten with what their
  command prints.

The test suite runs `--check` (crates/cli/tests/docs_and_scripts.rs), so a change that moves
these bytes fails until this script is run and the annotations are read again.
"""

import argparse
import difflib
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "format.md")

# §13.1, run as shown (with `sealfs` the binary under test).
BUILD = """mkdir -p src && printf 'hello\\n' > src/hello.txt
head -c 8192 /dev/zero | tr '\\0' a > src/a.bin
chmod 755 src && chmod 644 src/*
sealfs build -q -T 0 --all-root src ex.img"""

# §10.1: the §13 image's statement, with a name and a creation time.
STATEMENT_ARGS = ["--name", "example", "--created", "1764000000"]


# Prose facts: a pattern whose one group is replaced by what the command prints (run after the
# §13.1 build, in its directory). `abbrev:` commands print a SHA-256 shown as `8 hex…4 hex`.
FACTS = [
    (r"The file is (\d+) bytes\.", "stat -c %s ex.img"),
    (r"`plain\.img` is the (\d+) EROFS bytes",
     "sealfs build -q -T 0 --all-root --sidecar ex.seal src plain.img >/dev/null"
     " && stat -c %s plain.img"),
    (r"`ex\.seal` \((\d+) bytes\)", "stat -c %s ex.seal"),
    (r"- `([0-9a-f]{8}…[0-9a-f]{4})`, the hash of EROFS block 0",
     "abbrev:head -c 4096 ex.img | sha256sum"),
    (r"- `([0-9a-f]{8}…[0-9a-f]{4})` twice, the hashes of blocks 1 and 2",
     "abbrev:tail -c +4097 ex.img | head -c 4096 | sha256sum"),
    (r"The SHA-256 of this 4096-byte block is the root,\n`([0-9a-f]{8}…[0-9a-f]{4})`",
     "abbrev:tail -c +12289 ex.img | head -c 4096 | sha256sum"),
    # §13.8 (and §7.6, which counts its blocks): one 300,000-byte file, SHA-512, 1 KiB, salted.
    (r"- `erofs_length` (\d+), that is",
     "mkdir big && head -c 300000 /dev/zero | tr '\\0' x > big/f"
     " && sealfs build -q --hash-alg sha512 --verity-block-size 1024 --salt abcd big big.img"
     " >/dev/null && sealfs inspect big.img | awk '$1 == \"sealed\" {print $3}'"),
    (r"- `erofs_length` \d+, that is (\d+) data blocks of 1 KiB",
     "echo $(( $(sealfs inspect big.img | awk '$1 == \"sealed\" {print $3}') / 1024 ))"),
    (r"The SHA-512, 1 KiB, salted example in §13\.8 has (\d+) data blocks",
     "echo $(( $(sealfs inspect big.img | awk '$1 == \"sealed\" {print $3}') / 1024 ))"),
    (r"- a 3-level tree of (\d+) bytes",
     "sealfs inspect big.img | awk '$1 == \"Merkle\" && $2 == \"tree\" {print $3}'"),
]


def facts(work, sealfs):
    """[(pattern, value)] for FACTS."""
    out = []
    for pattern, cmd in FACTS:
        if cmd.startswith("abbrev:"):
            h = sh(cmd[len("abbrev:"):], work, sealfs).split()[0]
            value = f"{h[:8]}…{h[-4:]}"
        else:
            value = sh(cmd, work, sealfs).strip()
        out.append((pattern, value))
    return out


def apply_facts(doc, found):
    for pattern, value in found:
        m = list(re.finditer(pattern, doc))
        if len(m) != 1:
            sys.exit(f"examples.py: {len(m)} matches in docs/format.md for {pattern!r}")
        a, b = m[0].span(1)
        doc = doc[:a] + value + doc[b:]
    return doc


def sh(cmd, cwd, sealfs):
    """Runs a shell command line in `cwd` with `sealfs` on PATH first; returns its stdout."""
    env = dict(os.environ)
    env.pop("SOURCE_DATE_EPOCH", None)
    env["PATH"] = os.path.dirname(sealfs) + os.pathsep + env.get("PATH", "")
    env["LC_ALL"] = "C"
    # No pipefail: `tail ... | head -c N` ends tail with SIGPIPE (141) whenever head closes first,
    # as it does for the user who types the line; a stage that fails shows in the output compared.
    r = subprocess.run(["bash", "-eu", "-c", cmd], cwd=cwd, env=env,
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"examples.py: `{cmd}` failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def fence(text):
    return "```\n" + text.rstrip("\n") + "\n```\n"


def blocks(work, sealfs):
    """NAME -> the text of the generated block NAME."""
    out = {}
    printed = sh(BUILD, work, sealfs).strip()
    out["build"] = fence(BUILD + "\n# prints " + printed)
    args = " ".join(STATEMENT_ARGS)
    out["statement"] = fence(sh(f"sealfs statement ex.img {args}", work, sealfs))
    out["footer"] = fence(sh("tail -c 64 ex.img | xxd", work, sealfs))
    # The descriptor is at header offset 144; the header offset is the footer's field at 16.
    header = int(sh("tail -c 48 ex.img | head -c 8 | od -An -tu8", work, sealfs))
    skip = header + 144 + 1
    out["descriptor"] = fence(
        f"$ tail -c +{skip} ex.img | head -c 256 | sha256sum\n"
        + sh(f"tail -c +{skip} ex.img | head -c 256 | sha256sum | cut -d' ' -f1", work, sealfs)
    ) + f"\n`tail -c +{skip}` starts at byte {skip - 1} = {header} + 144.\n"
    hello = sh("fsverity digest src/hello.txt | cut -d' ' -f1", work, sealfs).strip()
    abin = sh("fsverity digest src/a.bin | cut -d' ' -f1", work, sealfs).strip()
    out["file-digests"] = (
        f"`fsverity digest src/hello.txt` gives\n`{hello}`. For `src/a.bin` it gives\n"
        f"`{abin}`. These are the two entries.\n"
    )
    return out, header


HEX_LINE = re.compile(r"^((?:[0-9a-f]{3} )?)([0-9a-f]{8}): (.*)$")


def redump(line, image, header):
    """`line` of an annotated dump with its hex rewritten from `image`; other lines unchanged."""
    m = HEX_LINE.match(line)
    if not m:
        return line
    hdr, off, rest = m.group(1), int(m.group(2), 16), m.group(3)
    if hdr and int(hdr, 16) + header != off:
        sys.exit(f"examples.py: {line!r}: header offset {hdr.strip()} is not file offset "
                 f"{off:#x} - {header}")
    hexpart, sep, note = rest.partition("  ")
    tokens = hexpart.split(" ")
    new, pos = [], off
    for t in tokens:
        if t == "..." or not re.fullmatch(r"(?:[0-9a-f]{2}){1,2}", t):
            new.append(t)
            continue
        n = len(t) // 2
        new.append(image[pos:pos + n].hex())
        pos += n
    return f"{hdr}{m.group(2)}: {' '.join(new)}{sep}{note}"


def render(doc, gen, image, header):
    lines = doc.split("\n")
    out, i = [], 0
    in_dump = False
    while i < len(lines):
        line = lines[i]
        m = re.fullmatch(r"<!-- examples\.py: ([a-z-]+) -->", line)
        if m and m.group(1) != "dump":
            name = m.group(1)
            if name not in gen:
                sys.exit(f"examples.py: docs/format.md names an unknown block {name!r}")
            out.append(line)
            out.extend(gen[name].rstrip("\n").split("\n"))
            j = i + 1
            while j < len(lines) and lines[j] != "<!-- /examples.py -->":
                j += 1
            if j == len(lines):
                sys.exit(f"examples.py: block {name!r} has no closing <!-- /examples.py -->")
            out.append(lines[j])
            i = j + 1
            continue
        if line == "<!-- examples.py: dump -->":
            in_dump = True
        elif line == "<!-- /examples.py: dump -->":
            in_dump = False
        elif in_dump:
            line = redump(line, image, header)
        out.append(line)
        i += 1
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="fail if docs/format.md differs")
    ap.add_argument("--sealfs", default=os.path.join(ROOT, "target", "release", "sealfs"))
    a = ap.parse_args()
    sealfs = os.path.abspath(a.sealfs)
    if not os.access(sealfs, os.X_OK):
        sys.exit(f"examples.py: no sealfs binary at {sealfs} (cargo build --release -p sealfs-cli)")
    with open(DOC) as f:
        doc = f.read()
    with tempfile.TemporaryDirectory() as work:
        gen, header = blocks(work, sealfs)
        found = facts(work, sealfs)
        with open(os.path.join(work, "ex.img"), "rb") as f:
            image = f.read()
    new = apply_facts(render(doc, gen, image, header), found)
    if new == doc:
        return 0
    if a.check:
        sys.stdout.writelines(difflib.unified_diff(
            doc.splitlines(True), new.splitlines(True), "docs/format.md", "docs/examples.py"))
        print("docs/format.md's examples differ from a real run: python3 docs/examples.py",
              file=sys.stderr)
        return 1
    with open(DOC, "w") as f:
        f.write(new)
    print("docs/format.md: examples regenerated", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
