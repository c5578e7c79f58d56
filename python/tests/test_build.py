"""Tests of the build backend (_backend/reins_build.py): the wheel, the editable wheel and the
sdist it writes hold what pip installs and what the wheel format requires (every file in
RECORD with its digest and size), with the name and version of pyproject.toml. The install
itself, by pip in a fresh venv of Debian's python3 with no index reachable, is
e2e/python_test.go's TestPythonExample."""

import base64
import hashlib
import os
import shutil
import sys
import tarfile
import tempfile
import unittest
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "_backend"))

import reins_build  # noqa: E402

MODULES = sorted(f"reins_worker/{n}" for n in os.listdir(os.path.join(ROOT, "reins_worker")) if n.endswith(".py"))


def record_of(z: zipfile.ZipFile) -> dict:
    info = [n for n in z.namelist() if n.endswith(".dist-info/RECORD")]
    rows = z.read(info[0]).decode().splitlines()
    return {r.split(",")[0]: r.split(",", 1)[1] for r in rows}


class Build(unittest.TestCase):
    def setUp(self):
        self.out = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.out)

    def test_wheel(self):
        name = reins_build.build_wheel(self.out)
        self.assertEqual(name, "reins_worker-0.1.0-py3-none-any.whl")
        self.assertEqual(reins_build.get_requires_for_build_wheel(), [])
        with zipfile.ZipFile(os.path.join(self.out, name)) as z:
            names = z.namelist()
            self.assertEqual(sorted(n for n in names if n.startswith("reins_worker/")), MODULES)
            for m in MODULES:
                with open(os.path.join(ROOT, m), "rb") as f:
                    self.assertEqual(z.read(m), f.read(), m)
            meta = z.read("reins_worker-0.1.0.dist-info/METADATA").decode()
            for line in ["Metadata-Version: 2.1", "Name: reins-worker", "Version: 0.1.0", "Requires-Python: >=3.10"]:
                self.assertIn(line + "\n", meta)
            self.assertIn("Root-Is-Purelib: true", z.read("reins_worker-0.1.0.dist-info/WHEEL").decode())
            record = record_of(z)
            self.assertEqual(set(record), set(names))
            for n in names:
                if n.endswith("RECORD"):
                    self.assertEqual(record[n], ",")
                    continue
                data = z.read(n)
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                self.assertEqual(record[n], f"sha256={digest},{len(data)}", n)
        # The same sources build the same bytes.
        again = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, again)
        reins_build.build_wheel(again)
        with open(os.path.join(self.out, name), "rb") as a, open(os.path.join(again, name), "rb") as b:
            self.assertEqual(a.read(), b.read())

    def test_editable(self):
        name = reins_build.build_editable(self.out)
        with zipfile.ZipFile(os.path.join(self.out, name)) as z:
            self.assertEqual(z.read("reins_worker.pth").decode(), ROOT + "\n")
            self.assertFalse([n for n in z.namelist() if n.startswith("reins_worker/")])
            self.assertIn("reins_worker.pth", record_of(z))

    def test_sdist_builds_the_wheel_again(self):
        name = reins_build.build_sdist(self.out)
        self.assertEqual(name, "reins_worker-0.1.0.tar.gz")
        with tarfile.open(os.path.join(self.out, name)) as tar:
            names = tar.getnames()
            tar.extractall(self.out)
        top = "reins_worker-0.1.0/"
        for want in ["PKG-INFO", "pyproject.toml", "README.md", "_backend/reins_build.py"] + MODULES:
            self.assertIn(top + want, names)
        # The sdist's own backend, from the unpacked tree, builds the same wheel.
        sys.path.insert(0, os.path.join(self.out, top, "_backend"))
        try:
            saved = sys.modules.pop("reins_build")
            import reins_build as unpacked
            self.assertEqual(unpacked.ROOT, os.path.join(self.out, "reins_worker-0.1.0"))
            wheels = tempfile.mkdtemp()
            self.addCleanup(shutil.rmtree, wheels)
            a, b = unpacked.build_wheel(wheels), saved.build_wheel(self.out)
            with open(os.path.join(wheels, a), "rb") as x, open(os.path.join(self.out, b), "rb") as y:
                self.assertEqual(x.read(), y.read())
        finally:
            sys.path.pop(0)
            sys.modules["reins_build"] = saved

    def test_refuses_what_it_cannot_build(self):
        tree = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tree)
        shutil.copytree(os.path.join(ROOT, "reins_worker"), os.path.join(tree, "reins_worker"))
        shutil.copy(os.path.join(ROOT, "README.md"), tree)
        with open(os.path.join(ROOT, "pyproject.toml")) as f:
            pyproject = f.read()
        cases = [
            ("no version", pyproject.replace('version = "0.1.0"\n', ""), "[project] has no version"),
            ("a dependency", pyproject.replace("dependencies = []", 'dependencies = ["nats-py"]'), "builds a package without any"),
        ]
        for what, text, want in cases:
            with self.subTest(what):
                with open(os.path.join(tree, "pyproject.toml"), "w") as f:
                    f.write(text)
                old, reins_build.ROOT = reins_build.ROOT, tree
                try:
                    with self.assertRaises(reins_build.BuildError) as e:
                        reins_build.build_wheel(self.out)
                finally:
                    reins_build.ROOT = old
                self.assertIn(want, str(e.exception))
                self.assertIn(os.path.join(tree, "pyproject.toml"), str(e.exception))


if __name__ == "__main__":
    unittest.main()
