"""Ship autotune_cache_all_kernels.pth at the top of site-packages, in wheels and editable installs,
ship the docs inside the package, and give the package index a description whose links work there.

Everything else about the package is declared in pyproject.toml.

The description is README.md. Its links into the repository (`[the cache](docs/cache.md)`) are
dead on a package index, which has no repository to resolve them against, so they become the
link text and the path (`the cache (docs/cache.md)`); docs/ ships in the sdist (MANIFEST.in).

The project has no web address, so help text and messages name docs pages by path
(autotune_cache/foundation/urls.py): build_py copies docs/'s pages (`*.md`, decisions included)
into the package's own docs folder of the wheel, where an installed copy finds them. An editable
install or a checkout reads the checkout's docs/ itself.

The .pth file is the start-up hook of AUTOTUNE_FLAGS=--autotune_all_kernels (docs/triton.md,
"Third-party kernels"): a file outside every package, which setuptools has no declarative way to
install, so two commands are extended, as coverage.py does for its own .pth file:

* build_py copies it to the root of the build directory, which is the root of a regular wheel;
* editable_wheel (PEP 660, `pip install -e`) adds it, with its RECORD line, to the editable wheel,
  which is built from its own temporary directory and never sees build_py's copy.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import zipfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

ROOT = Path(__file__).resolve().parent
PTH_NAME = "autotune_cache_all_kernels.pth"
PTH_SOURCE = ROOT / "autotune_cache" / "triton" / PTH_NAME
DOCS = ROOT / "docs"


def doc_pages() -> list[Path]:
    """docs/'s pages, relative to docs/ (none when building from a tree without docs/)."""
    return sorted(p.relative_to(DOCS) for p in DOCS.rglob("*.md")) if DOCS.is_dir() else []


class BuildPyWithPth(build_py):
    """build_py, plus the .pth file at the root of build_lib (the root of site-packages) and
    docs/'s pages in the package's docs folder."""

    def _docs_out(self) -> list[tuple[Path, Path]]:
        into = Path(self.build_lib) / "autotune_cache" / "docs"
        return [(DOCS / page, into / page) for page in doc_pages()]

    def run(self) -> None:
        super().run()
        self.copy_file(str(PTH_SOURCE), str(Path(self.build_lib) / PTH_NAME))
        for src, dst in self._docs_out():
            self.mkpath(str(dst.parent))
            self.copy_file(str(src), str(dst))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / PTH_NAME),
                *(str(dst) for _, dst in self._docs_out())]


def add_to_wheel(wheel: Path, name: str, data: bytes) -> None:
    """Add `name` at the wheel's root, with its line in RECORD, so installers install it and
    uninstall removes it."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record_line = f"{name},sha256={digest},{len(data)}\n".encode()
    staged = wheel.with_name(wheel.name + ".tmp")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as dst:
        records = [i for i in src.infolist() if i.filename.endswith(".dist-info/RECORD")]
        if len(records) != 1:
            raise RuntimeError(f"{wheel}: expected one .dist-info/RECORD, found {len(records)}")
        for item in src.infolist():
            payload = src.read(item.filename)
            if item is records[0]:
                payload = record_line + payload
            dst.writestr(item, payload)
        dst.writestr(name, data)
    os.replace(staged, wheel)


class EditableWheelWithPth(editable_wheel):
    """editable_wheel, plus the .pth file in the editable wheel it builds."""

    def run(self) -> None:
        super().run()
        wheels = sorted(Path(self.dist_dir).glob("*editable*.whl"), key=os.path.getmtime)
        if not wheels:
            raise RuntimeError(f"no editable wheel in {self.dist_dir} to add {PTH_NAME} to")
        add_to_wheel(wheels[-1], PTH_NAME, PTH_SOURCE.read_bytes())


RELATIVE_LINK = re.compile(r"\[([^\]]+)\]\((?!https?://|#)([^)\s]+)\)")


def package_description(readme: str) -> str:
    """README.md with every link into the repository written as `text (path)`."""
    return RELATIVE_LINK.sub(lambda m: f"{m.group(1)} (`{m.group(2)}`)", readme)


setup(
    cmdclass={"build_py": BuildPyWithPth, "editable_wheel": EditableWheelWithPth},
    long_description=package_description(
        (ROOT / "README.md").read_text(encoding="utf-8")),
    long_description_content_type="text/markdown",
)
