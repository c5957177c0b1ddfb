#!/usr/bin/env bash
# Writes the seed corpus of the oci_spec target (fuzz/corpus/oci_spec): the index.json, image
# manifests and configs of layouts made by umoci (OCI) and skopeo (OCI with zstd layers, Docker
# schema 2), and an index of several platforms as registries serve them. Needs umoci, skopeo,
# python3.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$here/corpus/oci_spec
mkdir -p "$out"
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
cd "$t"
umoci init --layout L >/dev/null
umoci new --image L:t >/dev/null
umoci unpack --image L:t b >/dev/null
echo hello > b/rootfs/f
umoci repack --image L:t b >/dev/null
umoci insert --image L:t --whiteout /f >/dev/null
skopeo copy -q --dest-compress --dest-compress-format zstd oci:L:t oci:Z:t
skopeo copy -q -f v2s2 oci:L:t dir:D
# Every JSON blob of the layouts (manifests and configs), and each index.json.
n=0
for f in L/index.json Z/index.json $(file L/blobs/sha256/* Z/blobs/sha256/* | grep -i json | cut -d: -f1) D/manifest.json; do
    cp "$f" "$out/$(printf '%02d' $n)-$(basename "$(dirname "$f")")-$(basename "$f" | cut -c1-12)"
    n=$((n + 1))
done
# An index of several platforms (the shape of a multi-architecture image in a registry), and
# a Docker manifest list.
python3 - "$out" L <<'PY'
import json, sys, os
out, layout = sys.argv[1], sys.argv[2]
m = json.load(open(os.path.join(layout, "index.json")))["manifests"][0]
def entry(os_, arch, variant=None):
    e = dict(m)
    e.pop("annotations", None)
    e["platform"] = {"os": os_, "architecture": arch}
    if variant:
        e["platform"]["variant"] = variant
    return e
plats = [entry("linux", "amd64"), entry("linux", "arm64", "v8"), entry("linux", "arm", "v7"),
         {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": m["digest"], "size": 1,
          "platform": {"os": "unknown", "architecture": "unknown"},
          "annotations": {"vnd.docker.reference.type": "attestation-manifest"}}]
json.dump({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": plats},
          open(os.path.join(out, "90-index-platforms"), "w"))
lst = [dict(p, mediaType="application/vnd.docker.distribution.manifest.v2+json") for p in plats[:3]]
json.dump({"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.list.v2+json",
           "manifests": lst}, open(os.path.join(out, "91-docker-list"), "w"))
PY
ls "$out"
