"""Build hook of the todre package: its version is libtodre's, read from the
repository's CMakeLists.txt (`project(todre VERSION x.y.z`), the one place
the version is written. Everything else is in pyproject.toml.

Where the file is looked for, first hit wins:
  1. $TODRE_CMAKE_LISTS (a path to CMakeLists.txt);
  2. ../../CMakeLists.txt next to this file (the repository layout; pip
     builds in place, so `pip install ./bindings/python` reaches it);
  3. PKG-INFO next to this file (building from an sdist made by this file).
Nothing found is an error: the package never gets a made-up version.
"""

import os
import re

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
_PROJECT = re.compile(r"project\s*\(\s*todre\s+VERSION\s+(\d+\.\d+\.\d+)\b", re.S)


def cmake_version(path):
    """x.y.z from project(todre VERSION x.y.z ...) in the CMakeLists.txt at `path`."""
    with open(path, encoding="utf-8") as f:
        m = _PROJECT.search(f.read())
    if not m:
        raise RuntimeError(f"todre: {path} has no 'project(todre VERSION x.y.z' line; "
                           "cannot derive the package version")
    return m.group(1)


def package_version():
    explicit = os.environ.get("TODRE_CMAKE_LISTS")
    if explicit:
        return cmake_version(explicit)
    repo = os.path.join(HERE, "..", "..", "CMakeLists.txt")
    if os.path.exists(repo):
        return cmake_version(repo)
    pkg_info = os.path.join(HERE, "PKG-INFO")
    if os.path.exists(pkg_info):
        with open(pkg_info, encoding="utf-8") as f:
            m = re.search(r"^Version:\s*(\S+)", f.read(), re.M)
        if m:
            return m.group(1)
    raise RuntimeError(
        f"todre: cannot find the repository's CMakeLists.txt (looked for {repo}); build "
        "the package from bindings/python inside the libtodre source tree, or set "
        "TODRE_CMAKE_LISTS to the path of its CMakeLists.txt")


if __name__ == "__main__":
    setup(version=package_version())
