#!/usr/bin/python3
# Stands in for nvidia-cdi-hook where there is no NVIDIA driver (tests/serve_cdi_podman_test.sh,
# the e2e cluster of tests/e2e): the runtime runs it as a createContainer hook named by
# gpulet's CDI spec. It records its arguments in hook.log beside itself and, for
# create-symlinks, makes each --link TARGET::PATH inside the container's root, which it finds
# as the real hook does: the OCI state on stdin names the bundle, whose config.json names the
# root. update-ldcache and other subcommands only record.
import json
import os
import sys

args = sys.argv[1:]
with open(os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), "hook.log"), "a") as log:
    log.write(" ".join(args) + "\n")
if args and args[0] == "create-symlinks":
    bundle = json.load(sys.stdin)["bundle"]
    with open(os.path.join(bundle, "config.json")) as f:
        root = json.load(f)["root"]["path"]
    root = root if os.path.isabs(root) else os.path.join(bundle, root)
    rest = iter(args[1:])
    for flag in rest:
        if flag == "--link":
            target, path = next(rest).split("::", 1)
            where = root + path
            os.makedirs(os.path.dirname(where), exist_ok=True)
            if os.path.lexists(where):
                os.remove(where)
            os.symlink(target, where)
