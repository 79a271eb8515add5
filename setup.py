"""What setup.cfg cannot express (ADR 0026).

- The package list: ``export_airflow`` (the Airflow edge) stays in ``plugins/``, where ``make run``
  and the tests' stacks point Airflow's plugins folder, and ships as a top-level package beside
  ``export_lib``, with its subpackages (``export_airflow.building``, ``.pages``, …; the mapping of
  the top package places them).
- Where the build writes its metadata: ``build/``, not the project root. An ``*.egg-info`` in the
  root is a second copy of the distribution to every process that has the root on ``sys.path``
  (pytest, ``python -m`` run from the root): Airflow then loads our ``airflow.plugins`` entry
  points twice and reports "Plugin 'export_plugin' already registered" as a plugin import error.
"""

from pathlib import Path

from setuptools import find_packages, setup

Path("build").mkdir(exist_ok=True)  # egg_info wants the directory to exist
setup(
    packages=[*find_packages(include=["export_lib", "export_lib.*"]),
              *find_packages("plugins", include=["export_airflow", "export_airflow.*"])],
    package_dir={"export_airflow": "plugins/export_airflow"},
    options={"egg_info": {"egg_base": "build"}},
)
