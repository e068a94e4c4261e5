"""Pre-commit hooks for the faults ports keep making (``porting-kit lint``).

One ``ast.parse`` and one traversal per Python file dispatch to every rule
family (:mod:`porting_kit.lint.engine`); deploy YAML is read with ruamel.yaml
(:mod:`porting_kit.lint.deploy_yaml`). Standard library + ruamel.yaml only:
the hooks install and run without torch. Rule codes: :mod:`porting_kit.lint.rules`.
"""
