"""Build step: generate the Python modules of the ``.proto`` files shipped in the packages.

pyproject.toml's ``[tool.setuptools.cmdclass]`` adds :class:`BuildProtos` to setuptools'
``build`` sub-commands, so it runs for a wheel (``pip install .``, ``python -m build``) and
for an editable install (``pip install -e .``, PEP 660), with the tools that
``[build-system] requires`` pins. For every ``NAME.proto`` in a package's folder, grpcio-tools'
protoc writes ``NAME_pb2.py`` (messages and descriptors) and ``NAME_pb2_grpc.py`` (client stub
and servicer), and mypy-protobuf writes their ``.pyi`` type stubs.

A wheel gets them in its build directory. An editable install imports the package from the
source tree, so there they are written next to the ``.proto`` (git ignores them). A failure
stops the build with protoc's message: an install never goes on without them.
"""

from __future__ import annotations

import shutil
import stat
import sys
import tempfile
from pathlib import Path

from setuptools import Command
from setuptools.command.build import build
from setuptools.errors import SetupError

#: what one ``.proto`` becomes
SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")

#: mypy-protobuf's two protoc plugins: (plugin name, function of ``mypy_protobuf.main``)
_PLUGINS = (("mypy", "main"), ("mypy_grpc", "grpc"))


class Build(build):
    """setuptools' ``build`` with :class:`BuildProtos` run after the Python modules."""

    sub_commands = [*build.sub_commands, ("build_protos", None)]


class BuildProtos(Command):
    """Generate ``*_pb2*.py`` and their stubs from the packages' ``.proto`` files."""

    description = "generate Python modules from the packages' .proto files (grpcio-tools)"
    user_options: list[tuple[str, str | None, str]] = []

    def initialize_options(self) -> None:
        """No options of its own: where to write comes from ``build_py``."""
        self.build_lib: str | None = None
        self.editable_mode = False

    def finalize_options(self) -> None:
        """Write where ``build_py`` writes (unless generating in place for an editable install)."""
        self.set_undefined_options("build_py", ("build_lib", "build_lib"))

    def _protos(self) -> list[tuple[str, Path]]:
        """(package, .proto file) for every ``.proto`` in a listed package's own folder."""
        package_dir = self.distribution.package_dir or {}
        found: list[tuple[str, Path]] = []
        for package in self.distribution.packages or ():
            folder = _folder(package, package_dir)
            found.extend((package, proto) for proto in sorted(folder.glob("*.proto")))
        return found

    def _target(self, package: str) -> Path:
        if self.editable_mode or self.build_lib is None:
            return _folder(package, self.distribution.package_dir or {})
        return Path(self.build_lib, *package.split("."))

    def run(self) -> None:
        """Generate each package's modules in its build folder (source folder when editable)."""
        for package, proto in self._protos():
            generate(package, proto, self._target(package))

    def get_source_files(self) -> list[str]:
        """The ``.proto`` files (what an sdist must carry)."""
        return [str(proto) for _, proto in self._protos()]

    def get_outputs(self) -> list[str]:
        """The generated files this command writes."""
        return [
            str(self._target(package) / f"{proto.stem}{suffix}")
            for package, proto in self._protos()
            for suffix in SUFFIXES
        ]

    def get_output_mapping(self) -> dict[str, str]:
        """Nothing is copied from the source tree: every output is generated."""
        return {}


def _folder(package: str, package_dir: dict[str, str]) -> Path:
    """The source folder of ``package`` under pyproject's ``package-dir`` mapping."""
    parts = package.split(".")
    for cut in range(len(parts), 0, -1):
        prefix = ".".join(parts[:cut])
        if prefix in package_dir:
            return Path(package_dir[prefix], *parts[cut:])
    return Path(package_dir.get("", "."), *parts)


def _plugin_scripts(where: Path) -> list[str]:
    """protoc ``--plugin`` options running mypy-protobuf with this interpreter.

    Small scripts rather than the console scripts on ``PATH``: they find the plugin in
    whatever environment runs the build (pip's isolated one or ``--no-build-isolation``).
    """
    options = []
    for name, function in _PLUGINS:
        script = where / f"protoc-gen-{name}"
        script.write_text(
            f"#!{sys.executable}\nfrom mypy_protobuf.main import {function}\n{function}()\n",
            encoding="utf-8",
        )
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
        options.append(f"--plugin=protoc-gen-{name}={script}")
    return options


def generate(package: str, proto: Path, target: Path) -> list[Path]:
    """Write ``proto``'s modules and stubs into ``target``; return the files written.

    The ``.proto`` is compiled from a copy placed at its package's path, so that the
    generated gRPC module imports its messages as ``package.NAME_pb2`` (absolute, as the
    installed package is named), not as a top-level module.
    """
    from grpc_tools import protoc  # noqa: PLC0415  (a build requirement, absent at run time)

    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        include = root / "include"
        source = include.joinpath(*package.split("."), proto.name)
        source.parent.mkdir(parents=True)
        shutil.copyfile(proto, source)
        out = root / "out"
        out.mkdir()
        well_known = Path(protoc.__file__).parent / "_proto"
        relative = source.relative_to(include).as_posix()
        status = protoc.main(
            [
                "grpc_tools.protoc",
                f"-I{include}",
                f"-I{well_known}",
                f"--python_out={out}",
                f"--grpc_python_out={out}",
                *_plugin_scripts(root),
                f"--mypy_out={out}",
                f"--mypy_grpc_out={out}",
                relative,
            ]
        )
        if status != 0:
            raise SetupError(f"protoc failed on {proto} (exit status {status})")
        generated = out.joinpath(*package.split("."))
        target.mkdir(parents=True, exist_ok=True)
        written = []
        for suffix in SUFFIXES:
            name = f"{proto.stem}{suffix}"
            if not (generated / name).is_file():
                raise SetupError(f"protoc wrote no {name} for {proto}")
            shutil.copyfile(generated / name, target / name)
            written.append(target / name)
    return written
