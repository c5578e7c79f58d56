"""The build backend of reins-worker (PEP 517, PEP 660): it builds the wheel, the editable
wheel and the sdist of this directory with Python's standard library alone.

The package has no dependency, and neither does its build: pip needs nothing from an index to
install it, so `pip install ./python` works in a venv of Debian's python3 with or without a
network (setuptools in a fresh venv is too old to build a wheel without the `wheel` package,
which is not there offline). It reads the [project] table of pyproject.toml (tomllib, or tomli
on Python 3.10: the one build requirement, for that version only) and packs reins_worker/.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile
from typing import Optional

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pyproject.toml asks for tomli there
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "reins_worker"
# What an sdist carries besides the package: enough to build the wheel again.
SDIST_FILES = ["pyproject.toml", "README.md", "_backend/reins_build.py"]
# Timestamps of the archives' entries (zip cannot hold one before 1980): the same sources
# build the same bytes.
EPOCH = 315532800


class BuildError(Exception):
    """pyproject.toml lacks what the backend needs."""


def _project() -> dict:
    path = os.path.join(ROOT, "pyproject.toml")
    with open(path, "rb") as f:
        project = tomllib.load(f).get("project", {})
    for key in ("name", "version"):
        if not isinstance(project.get(key), str) or not project[key]:
            raise BuildError(f"{path}: [project] has no {key}: the wheel's name needs it")
    if project.get("dependencies"):
        raise BuildError(f"{path}: [project] dependencies {project['dependencies']}: this backend builds a package without any")
    return project


def _dist_name(project: dict) -> str:
    """The name as wheel and sdist file names spell it (PEP 427, PEP 625)."""
    return re.sub(r"[-_.]+", "_", project["name"]).lower()


def _metadata(project: dict) -> bytes:
    """METADATA (core metadata 2.1), the README as its description."""
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}", f"Version: {project['version']}"]
    if project.get("description"):
        lines.append(f"Summary: {project['description']}")
    if project.get("requires-python"):
        lines.append(f"Requires-Python: {project['requires-python']}")
    lines += [f"Classifier: {c}" for c in project.get("classifiers", [])]
    lines += [f"Project-URL: {k}, {v}" for k, v in project.get("urls", {}).items()]
    body = ""
    readme = project.get("readme")
    if isinstance(readme, str):
        lines.append("Description-Content-Type: text/markdown")
        with open(os.path.join(ROOT, readme), encoding="utf-8") as f:
            body = f.read()
    return ("\n".join(lines) + "\n\n" + body).encode()


def _package_files() -> list[tuple[str, str]]:
    """(path in the archive, path on disk) of every module of the package, sorted."""
    out = []
    top = os.path.join(ROOT, PACKAGE)
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".py") or name == "py.typed":
                disk = os.path.join(dirpath, name)
                out.append((os.path.relpath(disk, ROOT).replace(os.sep, "/"), disk))
    if not out:
        raise BuildError(f"{top}: no module to pack")
    return out


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _write_wheel(wheel_directory: str, project: dict, files: list[tuple[str, bytes]], tag: str = "py3-none-any") -> str:
    """Writes the wheel of files and the project's dist-info (PEP 427) and returns its name."""
    dist = f"{_dist_name(project)}-{project['version']}"
    info = f"{dist}.dist-info"
    wheel = f"Wheel-Version: 1.0\nGenerator: reins_build\nRoot-Is-Purelib: true\nTag: {tag}\n".encode()
    entries = files + [(f"{info}/METADATA", _metadata(project)), (f"{info}/WHEEL", wheel)]
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in entries) + f"{info}/RECORD,,\n"
    entries.append((f"{info}/RECORD", record.encode()))
    filename = f"{dist}-{tag}.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries:
            zi = zipfile.ZipInfo(name, time.gmtime(EPOCH)[:6])
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    return filename


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# PEP 517 hooks.
def get_requires_for_build_wheel(config_settings: Optional[dict] = None) -> list[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[dict] = None) -> list[str]:
    return []


def build_wheel(wheel_directory: str, config_settings: Optional[dict] = None, metadata_directory: Optional[str] = None) -> str:
    return _write_wheel(wheel_directory, _project(), [(name, _read(disk)) for name, disk in _package_files()])


def build_sdist(sdist_directory: str, config_settings: Optional[dict] = None) -> str:
    project = _project()
    dist = f"{_dist_name(project)}-{project['version']}"
    members = [(f"{dist}/PKG-INFO", _metadata(project))]
    members += [(f"{dist}/{name}", _read(os.path.join(ROOT, name))) for name in SDIST_FILES]
    members += [(f"{dist}/{name}", _read(disk)) for name, disk in _package_files()]
    filename = f"{dist}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            ti.size, ti.mtime, ti.mode = len(data), EPOCH, 0o644
            tar.addfile(ti, io.BytesIO(data))
    return filename


# PEP 660: an editable install puts this directory on sys.path through a .pth file.
def get_requires_for_build_editable(config_settings: Optional[dict] = None) -> list[str]:
    return []


def build_editable(wheel_directory: str, config_settings: Optional[dict] = None, metadata_directory: Optional[str] = None) -> str:
    project = _project()
    _package_files()  # the directory holds the package
    pth = (_dist_name(project) + ".pth", (ROOT + "\n").encode())
    return _write_wheel(wheel_directory, project, [pth])
