"""Container images for the real node, built here from Debian packages.

No image registry is reachable from the machines this project is tested on, so
every image a pod of the real node runs is built locally with ``buildah`` (a
Debian package) from the recipes in ``testbed/images/`` over files of Debian's
``busybox-static``, saved as an OCI archive under ``~/.cache/fluence/images`` and
imported into the node's containerd under the name pods ask for. An archive is
rebuilt only when its recipe or the busybox binary changes.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from testbed.binaries import cache_root

RECIPES = Path(__file__).with_name("images")
BUSYBOX = Path("/bin/busybox")
BUSYBOX_PACKAGE = "busybox-static"


class ImageBuildError(RuntimeError):
    """An image could not be built (the message says what to install or what failed)."""


@dataclass(frozen=True)
class Image:
    """One locally built image: its recipe and the names containerd knows it by."""

    recipe: str
    """File name in ``testbed/images/``."""
    names: tuple[str, ...]
    """Image references pods (or containerd's sandbox setting) use."""


PAUSE = Image("pause.Containerfile", ("localhost/fluence/pause:1",))
"""Each pod's sandbox: holds the pod's namespaces until the pod ends."""
BUSYBOX_IMAGE = Image(
    "busybox.Containerfile",
    ("docker.io/library/busybox:1.36", "docker.io/library/busybox:latest"),
)
"""The image the examples and tests run (``busybox:1.36``, ``busybox``)."""
NODE_IMAGES = (PAUSE, BUSYBOX_IMAGE)


def images_dir() -> Path:
    return cache_root() / "images"


def _buildah() -> str:
    found = shutil.which("buildah")
    if found is None:
        raise ImageBuildError("buildah is not installed; install the Debian package `buildah`")
    return found


def _busybox() -> Path:
    if not BUSYBOX.is_file():
        raise ImageBuildError(
            f"{BUSYBOX} is missing; install the Debian package `{BUSYBOX_PACKAGE}`"
        )
    return BUSYBOX


def _key(image: Image) -> str:
    digest = hashlib.sha256()
    digest.update((RECIPES / image.recipe).read_bytes())
    digest.update(b"\0")
    digest.update(_busybox().read_bytes())
    digest.update(b"\0")
    digest.update("\n".join(image.names).encode())
    return digest.hexdigest()[:16]


def archive_path(image: Image) -> Path:
    stem = image.recipe.removesuffix(".Containerfile")
    return images_dir() / f"{stem}-{_key(image)}.oci.tar"


def _context(directory: Path) -> None:
    """Build context: ``bin/`` with busybox and a link per applet, as its --install would."""
    bin_dir = directory / "bin"
    bin_dir.mkdir()
    shutil.copy2(_busybox(), bin_dir / "busybox")
    applets = subprocess.run(
        [str(_busybox()), "--list"], check=True, capture_output=True, text=True
    ).stdout.split()
    for applet in applets:
        if applet != "busybox" and "/" not in applet:
            (bin_dir / applet).symlink_to("busybox")


def _run(argv: list[str], log: TextIO) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        log.write(done.stdout + done.stderr)
        raise ImageBuildError(
            f"`{' '.join(argv)}` failed with exit code {done.returncode}:\n"
            f"{(done.stderr or done.stdout)[-2000:]}"
        )


def ensure_image(image: Image, *, log: TextIO | None = None) -> Path:
    """The image's OCI archive, built first when its recipe or busybox changed."""
    out = log if log is not None else sys.stderr
    target = archive_path(image)
    if target.is_file():
        return target
    buildah = _buildah()
    target.parent.mkdir(parents=True, exist_ok=True)
    storage = images_dir() / "buildah"
    print(f"[images] building {image.names[0]} with buildah", file=out, flush=True)
    with tempfile.TemporaryDirectory(prefix="fluence-image-") as tmp:
        context = Path(tmp) / "context"
        context.mkdir()
        _context(context)
        common = [
            buildah,
            f"--root={storage / 'root'}",
            f"--runroot={Path(tmp) / 'run'}",
            "--storage-driver=vfs",
        ]
        tag = f"localhost/fluence-build/{target.stem.lower()}"
        _run(
            [
                *common,
                "bud",
                "--isolation=chroot",
                "--layers=false",
                "-f",
                str(RECIPES / image.recipe),
                "-t",
                tag,
                str(context),
            ],
            out,
        )
        partial = target.with_suffix(f".{os.getpid()}.partial")
        try:
            _run([*common, "push", tag, f"oci-archive:{partial}:{image.names[0]}"], out)
            partial.rename(target)
        finally:
            partial.unlink(missing_ok=True)
            subprocess.run([*common, "rmi", "--force", tag], capture_output=True, check=False)
    for stale in target.parent.glob(f"{target.name.split('-', 1)[0]}-*.oci.tar"):
        if stale != target:
            stale.unlink(missing_ok=True)
    return target


def missing_tools() -> str | None:
    """Why images cannot be built here (one line), or None when they can."""
    if shutil.which("buildah") is None:
        return "buildah is not installed (Debian package `buildah`)"
    if not BUSYBOX.is_file():
        return f"{BUSYBOX} is missing (Debian package `{BUSYBOX_PACKAGE}`)"
    return None
