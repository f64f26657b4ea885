#!/usr/bin/env python3
"""Assembles the meshnode OCI image from Debian packages and a meshnode binary.

Called by images/build.sh (which fetches the packages and builds the binary):

    oci.py --out OUT --binary MESHNODE --version V --commit C --epoch SECONDS \
        [--cuda SITE --cuda-lib PATH... --cache DIR] DEB...

Writes OUT/oci (an OCI image layout; its one manifest carries the reference name V) and
OUT/meshnode.tar (a docker-archive tagged meshnode:V), and prints the manifest digest.
Everything is deterministic: entries sorted, owners numeric, times the commit's, gzip
without a name or time.

With --cuda (the site folder `images/cuda.sh licences` prints), a layer between the
packages and the binary carries the CUDA libraries the node opens (each --cuda-lib, the
lines of `images/cuda.sh runtime`, in /usr/lib/fleetmesh/cuda, on the image's
LD_LIBRARY_PATH) and NVIDIA's licence of each
wheel they come from (/usr/share/doc/fleetmesh-cuda/WHEEL/License.txt). The layer depends
on the pinned wheels only, so its times are CUDA_EPOCH and it is built once and kept in
--cache (compressing 0.8 GB takes a minute; the image check builds the image twice).
"""

import argparse
import datetime
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

UID = 10001
DATA = "var/lib/meshnode"
PORT = 7777
SOURCE = "https://github.com/fleetmesh/fleetmesh"
CUDA_DIR = "usr/lib/fleetmesh/cuda"
# the CUDA 13.0 Update 2 release date: the CUDA layer's times (it does not change with
# the commit, so it is cached)
CUDA_EPOCH = 1_760_000_000
CUDA_LAYER_FORMAT = "1"


def sha256(b: bytes) -> str:
    return "sha256:" + hashlib.sha256(b).hexdigest()


def canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def trim(base: str) -> None:
    """Drops documentation (but each package's copyright file), manuals and lintian data."""
    doc = os.path.join(base, "usr/share/doc")
    for pkg in sorted(os.listdir(doc)) if os.path.isdir(doc) else []:
        d = os.path.join(doc, pkg)
        if os.path.islink(d) or not os.path.isdir(d):
            continue
        for name in os.listdir(d):
            if name != "copyright":
                p = os.path.join(d, name)
                shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.remove(p)
    for sub in ("usr/share/man", "usr/share/info", "usr/share/lintian", "usr/share/bug"):
        shutil.rmtree(os.path.join(base, sub), ignore_errors=True)


def write(base: str, rel: str, text: str, mode: int = 0o644) -> None:
    path = os.path.join(base, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def system_files(base: str) -> None:
    """The user, name service, CA bundle and directories the node needs."""
    write(base, "etc/passwd",
          "root:x:0:0:root:/root:/usr/sbin/nologin\n"
          f"meshnode:x:{UID}:{UID}:fleetmesh node:/{DATA}:/usr/sbin/nologin\n")
    write(base, "etc/group", f"root:x:0:\nmeshnode:x:{UID}:\n")
    write(base, "etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n")
    write(base, "etc/hosts", "127.0.0.1 localhost\n::1 localhost\n")
    # what ca-certificates' postinst would make: the Mozilla roots in one bundle
    roots = os.path.join(base, "usr/share/ca-certificates/mozilla")
    bundle = ""
    for name in sorted(os.listdir(roots)):
        with open(os.path.join(roots, name)) as f:
            bundle += f.read().rstrip("\n") + "\n"
    write(base, "etc/ssl/certs/ca-certificates.crt", bundle)
    for rel, mode in (("tmp", 0o1777), (DATA, 0o700), ("root", 0o700)):
        os.makedirs(os.path.join(base, rel), exist_ok=True)
        os.chmod(os.path.join(base, rel), mode)


def layer(root: str, epoch: int) -> bytes:
    """The tree under `root` as a tar: sorted, root-owned (the node's directory its
    user's), every time `epoch`."""
    entries = []
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            entries.append(os.path.relpath(os.path.join(dirpath, n), root))
    entries.sort()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in entries:
            full = os.path.join(root, rel)
            info = tar.gettarinfo(full, arcname=rel)
            owner = UID if rel == DATA else 0
            info.uid = info.gid = owner
            info.uname = info.gname = ""
            info.mtime = epoch
            if info.isreg():
                with open(full, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return buf.getvalue()


def cuda_layer(site: str, libs: list, cache: str) -> tuple:
    """The layer (tar, gzip) of the CUDA libraries `libs` with the licences of `site`'s
    wheels, from `cache` when made before: keyed by the pinned wheels (site's RECORD
    files), the libraries' names and this layer's format."""
    names = sorted(os.path.basename(p) for p in libs)
    key = hashlib.sha256(CUDA_LAYER_FORMAT.encode() + repr(names).encode())
    wheels = sorted(d for d in os.listdir(site) if d.endswith(".dist-info"))
    for d in wheels:
        with open(os.path.join(site, d, "RECORD"), "rb") as f:
            key.update(f.read())
    stem = os.path.join(cache, "cuda-layer-" + key.hexdigest()[:16])
    if os.path.exists(stem + ".tar.gz") and os.path.exists(stem + ".tar"):
        with open(stem + ".tar", "rb") as t, open(stem + ".tar.gz", "rb") as g:
            return t.read(), g.read()
    with tempfile.TemporaryDirectory() as tmp:
        for src in libs:
            dst = os.path.join(tmp, CUDA_DIR, os.path.basename(src))
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copyfile(src, dst)
            os.chmod(dst, 0o644)
        for d in wheels:
            lic = os.path.join(site, d, "licenses", "License.txt")
            if not os.path.exists(lic):
                lic = os.path.join(site, d, "License.txt")
            name = d[: -len(".dist-info")]
            dst = os.path.join(tmp, "usr/share/doc/fleetmesh-cuda", name, "License.txt")
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copyfile(lic, dst)
            os.chmod(dst, 0o644)
        for dirpath, dirnames, _ in os.walk(tmp):
            for n in dirnames:
                os.chmod(os.path.join(dirpath, n), 0o755)
        tar = layer(tmp, CUDA_EPOCH)
    gz = gzip.compress(tar, compresslevel=6, mtime=0)
    os.makedirs(cache, exist_ok=True)
    for ext, data in ((".tar", tar), (".tar.gz", gz)):
        with open(stem + ext + ".part", "wb") as f:
            f.write(data)
        os.replace(stem + ext + ".part", stem + ext)
    return tar, gz


def tar_of(files: list, epoch: int) -> bytes:
    """A tar of (name, bytes) files, in that order, root-owned, 0644."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), epoch, 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def packages_of(debs: list) -> str:
    return ", ".join(os.path.basename(d).rsplit("_", 1)[0] for d in sorted(debs))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--version", required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--epoch", required=True, type=int)
    ap.add_argument("--cuda", help="the CUDA wheels' site folder (images/cuda.sh licences)")
    ap.add_argument("--cuda-lib", action="append", default=[],
                    help="a CUDA library for the layer (images/cuda.sh runtime)")
    ap.add_argument("--cache", help="where the CUDA layer is kept between builds")
    ap.add_argument("debs", nargs="+")
    a = ap.parse_args()
    created = datetime.datetime.fromtimestamp(a.epoch, datetime.timezone.utc)
    created = created.strftime("%Y-%m-%dT%H:%M:%SZ")

    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, "base")
        os.makedirs(base)
        for deb in sorted(a.debs):
            subprocess.run(["dpkg-deb", "-x", deb, base], check=True)
        trim(base)
        system_files(base)
        app = os.path.join(tmp, "app")
        os.makedirs(os.path.join(app, "usr/bin"))
        shutil.copyfile(a.binary, os.path.join(app, "usr/bin/meshnode"))
        os.chmod(os.path.join(app, "usr/bin/meshnode"), 0o755)
        for d in ("usr", "usr/bin"):
            os.chmod(os.path.join(app, d), 0o755)
        tars = [layer(base, a.epoch), layer(app, a.epoch)]
        gz = [gzip.compress(t, compresslevel=9, mtime=0) for t in tars]
    history = [
        {"created": created, "created_by": "images/build.sh: Debian packages " + packages_of(a.debs)},
        {"created": created, "created_by": "images/build.sh: /usr/bin/meshnode " + a.commit},
    ]
    if a.cuda:
        if not a.cache or not a.cuda_lib:
            ap.error("--cuda needs --cuda-lib and --cache")
        cuda_tar, cuda_gz = cuda_layer(a.cuda, a.cuda_lib, a.cache)
        tars.insert(1, cuda_tar)
        gz.insert(1, cuda_gz)
        history.insert(1, {"created": created,
                           "created_by": "images/build.sh: CUDA libraries (images/cuda.sh) in /"
                           + CUDA_DIR})

    packages = packages_of(a.debs)
    labels = {
        "org.opencontainers.image.title": "meshnode",
        "org.opencontainers.image.description":
            "fleetmesh node: verifiable compute (Groth16 proofs, LLM inference, WASI jobs) "
            "on an accountable federation of Nostr relays",
        "org.opencontainers.image.version": a.version,
        "org.opencontainers.image.revision": a.commit,
        "org.opencontainers.image.created": created,
        "org.opencontainers.image.source": SOURCE,
        "org.opencontainers.image.url": SOURCE,
        "org.opencontainers.image.documentation": SOURCE + "/blob/main/docs/operator-manual.md",
        "org.opencontainers.image.licenses": "Apache-2.0 OR MIT",
        "org.opencontainers.image.vendor": "fleetmesh developers",
        "org.opencontainers.image.base.name": "debian packages: " + packages,
    }
    second = 1_000_000_000
    config = {
        "created": created,
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": f"{UID}:{UID}",
            "Env": [
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "MESHNODE_LOG=info",
                # what the NVIDIA container toolkit should mount: every GPU, CUDA and Vulkan
                "NVIDIA_VISIBLE_DEVICES=all",
                "NVIDIA_DRIVER_CAPABILITIES=compute,utility,graphics",
            ] + ([f"LD_LIBRARY_PATH=/{CUDA_DIR}"] if a.cuda else []),
            "Entrypoint": ["/usr/bin/meshnode", "up", "/" + DATA, "--listen", f"0.0.0.0:{PORT}"],
            "WorkingDir": "/" + DATA,
            "ExposedPorts": {f"{PORT}/tcp": {}},
            "Volumes": {"/" + DATA: {}},
            "StopSignal": "SIGTERM",
            "Labels": labels,
            # Docker's extension of the image config (podman reads it from docker-archives)
            "Healthcheck": {
                "Test": ["CMD", "/usr/bin/meshnode", "watch", "--node",
                         f"http://127.0.0.1:{PORT}", "--healthcheck"],
                "Interval": 30 * second,
                "Timeout": 10 * second,
                "StartPeriod": 120 * second,
                "Retries": 3,
            },
        },
        "rootfs": {"type": "layers", "diff_ids": [sha256(t) for t in tars]},
        "history": history,
    }
    config_bytes = canonical(config)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": sha256(config_bytes),
            "size": len(config_bytes),
        },
        "layers": [
            {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
             "digest": sha256(g), "size": len(g)}
            for g in gz
        ],
        "annotations": {k: v for k, v in labels.items()
                        if k in ("org.opencontainers.image.created",
                                 "org.opencontainers.image.version",
                                 "org.opencontainers.image.revision",
                                 "org.opencontainers.image.source")},
    }
    manifest_bytes = canonical(manifest)
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": sha256(manifest_bytes),
            "size": len(manifest_bytes),
            "annotations": {
                "org.opencontainers.image.ref.name": a.version,
                "io.containerd.image.name": f"meshnode:{a.version}",
            },
        }],
    }

    layout = os.path.join(a.out, "oci")
    shutil.rmtree(layout, ignore_errors=True)
    blobs = os.path.join(layout, "blobs", "sha256")
    os.makedirs(blobs)
    for b in [config_bytes, manifest_bytes, *gz]:
        with open(os.path.join(blobs, sha256(b).split(":")[1]), "wb") as f:
            f.write(b)
    with open(os.path.join(layout, "oci-layout"), "wb") as f:
        f.write(canonical({"imageLayoutVersion": "1.0.0"}))
    with open(os.path.join(layout, "index.json"), "wb") as f:
        f.write(canonical(index))

    # the same image for `docker load`: config, uncompressed layers, manifest.json
    config_name = sha256(config_bytes).split(":")[1] + ".json"
    files = [(config_name, config_bytes)]
    layer_names = []
    for t in tars:
        name = sha256(t).split(":")[1] + "/layer.tar"
        layer_names.append(name)
        files.append((name, t))
    files.append(("manifest.json", canonical([{
        "Config": config_name,
        "RepoTags": [f"meshnode:{a.version}"],
        "Layers": layer_names,
    }])))
    with open(os.path.join(a.out, "meshnode.tar"), "wb") as f:
        f.write(tar_of(files, a.epoch))
    print(sha256(manifest_bytes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
