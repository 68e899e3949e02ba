"""The image's promises, checked on the image built from our Dockerfile (`make image`), not only by
reading the Dockerfile: non-root 10001, `groupwarden --version`, no compiler and no pip in the
final stage. (Read-only root filesystem and dropped capabilities are the chart's: checked on the
running pod in test_node_chart.py.)"""

from __future__ import annotations

import subprocess

import pytest

from gwtest.env import REPO
from gwtest.node import build_image, docker, image_config


@pytest.fixture(scope="module")
def image() -> str:
    return build_image()


def run(image: str, *command: str) -> str:
    result = docker(
        "run",
        "--rm",
        "--network",
        "none",
        "--read-only",
        "--entrypoint",
        command[0],
        image,
        *command[1:],
        check=False,
    )
    return result.stdout + result.stderr


def test_the_image_runs_as_the_numeric_non_root_user(image: str) -> None:
    assert image_config(image)["Config"]["User"] == "10001:10001"
    assert run(image, "id", "-u").strip() == "10001"
    # The user has a passwd entry (getpwuid works: libraries looking up a home directory do not fail).
    assert (
        run(image, "python", "-c", "import os, pwd; print(pwd.getpwuid(os.getuid()).pw_dir)").strip()
        == "/tmp"
    )


def test_groupwarden_version_runs_inside_the_image(image: str) -> None:
    from groupwarden import __version__

    result = docker("run", "--rm", "--network", "none", "--read-only", image, "--version")
    assert result.stdout.strip() == f"groupwarden {__version__}"
    assert image_config(image)["Config"]["Entrypoint"] == ["groupwarden"]


def test_the_oci_labels_carry_the_version_and_the_commit(image: str) -> None:
    from groupwarden import __version__

    labels = image_config(image)["Config"]["Labels"]
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert labels["org.opencontainers.image.version"] == __version__
    assert labels["org.opencontainers.image.revision"] == head.stdout.strip()


def test_the_final_stage_has_no_compiler_and_no_pip(image: str) -> None:
    found = run(
        image,
        "sh",
        "-c",
        "for t in gcc cc c++ g++ clang make ld as pip pip3; do command -v $t; done;"
        " find / -xdev \\( -name 'pip' -o -name 'pip-*.whl' -o -name 'pip-*.dist-info'"
        " -o -name 'setuptools' \\) -print 2>/dev/null;"
        " python -m pip --version >/dev/null 2>&1 && echo 'python -m pip works'; echo done",
    )
    assert found.strip() == "done", found
