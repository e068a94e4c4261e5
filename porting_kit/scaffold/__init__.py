"""Scaffolding: facts from a config -> templates -> files -> validation.

* :mod:`porting_kit.scaffold.facts` reads what a scaffold needs from a HF ``config.json``;
* :mod:`porting_kit.scaffold.generate` decides the files and renders the Jinja2
  templates (``templates/`` at the repository top, package data in a wheel);
* :mod:`porting_kit.scaffold.validate` checks a generated tree (every ``scaffold.*``
  code is built there).
"""

from porting_kit.scaffold.generate import ScaffoldOptions, ScaffoldResult, scaffold

__all__ = ["ScaffoldOptions", "ScaffoldResult", "scaffold"]
