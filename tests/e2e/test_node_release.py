"""A whole `make release` with the image, on the devstack's dockerd (scripts/release.sh: the offline
build of devstack/node.sh, docker save, the SBOM checked against the image's own /opt/groupwarden).
The artifacts without the image are checked in detail by tests/integration/test_release.py; here
what only the image adds: the tarball, its OCI labels, its place in SHA256SUMS."""

from __future__ import annotations

import gzip
import json
import subprocess
import tarfile
from pathlib import Path

from groupwarden import __version__
from gwtest.env import REPO
from gwtest.node import node_env


def test_a_release_with_the_image(tmp_path: Path) -> None:
    # --rehearsal: HEAD is not the commit deploy/releases.txt records for this version (and the tree
    # may have changes); everything else is the release's own path.
    result = subprocess.run(
        [str(REPO / "scripts" / "release.sh"), "--rehearsal", "--out", str(tmp_path), __version__],
        capture_output=True,
        text=True,
        timeout=900,
        env={**node_env(), "PYTHON": str(REPO / ".venv" / "bin" / "python")},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    v = __version__
    image = tmp_path / f"groupwarden-{v}-image.tar.gz"
    summed = {line.split()[1] for line in (tmp_path / "SHA256SUMS").read_text().splitlines()}
    assert summed == {p.name for p in tmp_path.iterdir() if p.name != "SHA256SUMS"}
    assert image.name in summed
    check = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=tmp_path, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    # The SBOM was compared with what the image's interpreter lists (release.sh fails otherwise).
    assert f"groupwarden-{v}-sbom.cdx.json: the " in result.stderr
    assert "packages of image-packages.txt, with their versions" in result.stderr

    # The saved image: tagged groupwarden:VERSION, labels version and revision (the commit).
    with gzip.open(image) as raw, tarfile.open(fileobj=raw, mode="r|") as tar:
        files: dict[str, bytes] = {}
        for member in tar:
            # manifest.json and the image config: `<id>.json` (docker's own layout) or a small blob
            # (the OCI layout of newer dockers); the layers are skipped.
            top_json = member.name.endswith(".json") and "/" not in member.name
            small_blob = member.name.startswith("blobs/sha256/") and member.size < 64_000
            if member.isfile() and (top_json or small_blob):
                extracted = tar.extractfile(member)
                assert extracted is not None
                files[member.name] = extracted.read()
    (manifest,) = json.loads(files["manifest.json"])
    assert manifest["RepoTags"] == [f"groupwarden:{v}"]
    labels = json.loads(files[manifest["Config"]])["config"]["Labels"]
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain"], capture_output=True, text=True)
    revision = commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    assert labels["org.opencontainers.image.version"] == v
    assert labels["org.opencontainers.image.revision"] == revision
