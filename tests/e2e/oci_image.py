#!/usr/bin/env python3
"""Writes an OCI image archive (an OCI image layout in a tar, as `ctr images import` reads it)
from a directory, without a registry or a container engine: one layer, the directory's files.

  oci_image.py --root DIR --name REF --out FILE.tar [--entrypoint ARG]... [--cmd ARG]...

REF is the full name containerd gives the image (registry.k8s.io/pause:3.10). The layer's
entries are sorted and their times zeroed, so the same directory makes the same image.
"""
import argparse
import hashlib
import io
import json
import os
import sys
import tarfile


def layer_tar(root):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        paths = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(dirnames + filenames):
                paths.append(os.path.join(dirpath, name))
        for path in sorted(paths):
            info = tar.gettarinfo(path, arcname=os.path.relpath(path, root))
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if info.isreg():
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return buf.getvalue()


def blob(data):
    return "sha256:" + hashlib.sha256(data).hexdigest(), data


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--entrypoint", action="append", default=[])
    p.add_argument("--cmd", action="append", default=[])
    a = p.parse_args()
    if not os.path.isdir(a.root):
        sys.exit(f"oci_image: --root {a.root} is not a directory")

    layer_digest, layer = blob(layer_tar(a.root))
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": a.entrypoint or None, "Cmd": a.cmd or None,
                   "Env": ["PATH=/bin:/usr/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    }
    config_digest, config_bytes = blob(json.dumps(config, sort_keys=True).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": config_digest, "size": len(config_bytes)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": layer_digest, "size": len(layer)}],
    }
    manifest_digest, manifest_bytes = blob(json.dumps(manifest, sort_keys=True).encode())
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest, "size": len(manifest_bytes),
            "annotations": {"io.containerd.image.name": a.name,
                            "org.opencontainers.image.ref.name": a.name.rsplit(":", 1)[-1]},
        }],
    }
    with tarfile.open(a.out, "w") as out:
        def add(name, data):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))
        add("oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
        add("index.json", json.dumps(index).encode())
        for digest, data in ((layer_digest, layer), (config_digest, config_bytes),
                             (manifest_digest, manifest_bytes)):
            add("blobs/sha256/" + digest.split(":")[1], data)


if __name__ == "__main__":
    main()
