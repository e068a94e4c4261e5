"""Build hook: copy the repository's top-level shipped folders into the wheel.

``templates/``, ``notebooks/``, ``examples/`` and ``reference_audio/`` stay at the top
of the repository (the product card fixes them there); a wheel carries them as
package data under ``porting_kit/_shipped/`` so that ``pip install .`` (not only
``-e``) can scaffold and copy out the walkthroughs. ``porting_kit.resources``
finds either copy.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED = ("templates", "notebooks", "examples", "reference_audio")
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints")


class BuildWithShipped(build_py):
    def run(self):
        super().run()
        root = Path(__file__).resolve().parent
        dest = Path(self.build_lib) / "porting_kit" / "_shipped"
        for name in SHIPPED:
            if (root / name).is_dir():
                shutil.rmtree(dest / name, ignore_errors=True)
                shutil.copytree(root / name, dest / name, ignore=IGNORE)


setup(cmdclass={"build_py": BuildWithShipped})
