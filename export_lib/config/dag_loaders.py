"""One DAG loader file per company file: ``dags/config/<id>.yaml`` ↔ ``dags/company_<id>.py``.

Airflow reports import errors per DAG file, so one loader per company keeps "one broken company
file = one import error, the others load". The price is a second file per company; this module
makes a missing or orphaned loader impossible to miss: ``exportctl validate`` and the
``dags/config_check.py`` DAG file (a Broken DAG in the UI) name it and the command that fixes it,
and ``exportctl loaders`` (run by ``make setup``) writes the missing ones.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from export_lib import settings
from export_lib.config.loader import DEFAULTS_FILE

LOADER_PREFIX = "company_"
CONFIG_SUFFIXES = (".yaml", ".yml")
FIX = "exportctl loaders {dags}"

# The text of a generated loader, line by line (kept as string lines so no tool mistakes the
# template for an Airflow import of this plain-Python package).
LOADER_TEMPLATE = "\n".join((
    '"""Export DAGs of company `{company}` (config: dags/config/{config}).',
    "",
    "Thin loader: the company id is this file's name; see plugins/export_airflow/dag_factory.py.",
    '"""',
    "",
    'from airflow.sdk import DAG  # noqa: F401  (Airflow\'s safe-mode discovery looks for "DAG")',
    "from export_airflow.dag_factory import register_company_dags",
    "",
    "register_company_dags(__file__, globals())",
    "",
))


@dataclass(frozen=True)
class LoaderCheck:
    """Company files without a loader and loaders without a company file, by path."""

    dags_dir: Path
    missing: tuple[Path, ...]  # company config files whose loader does not exist
    orphans: tuple[Path, ...]  # loaders whose company config file does not exist

    @property
    def ok(self) -> bool:
        return not self.missing and not self.orphans

    def problems(self) -> list[str]:
        fix = FIX.format(dags=self.dags_dir)
        lines = [f"{config}: no DAG loader {loader_path(self.dags_dir, config.stem)}, so this "
                 f"company's DAGs never appear in Airflow; create it with: {fix}"
                 for config in self.missing]
        lines += [f"{loader}: DAG loader without a company file "
                  f"{self.dags_dir / 'config' / (company_of(loader) + '.yaml')}; remove it with: "
                  f"{fix}" for loader in self.orphans]
        return lines


def loader_path(dags_dir: Path, company: str) -> Path:
    return dags_dir / f"{LOADER_PREFIX}{company}.py"


def company_of(loader: Path) -> str:
    return loader.stem.removeprefix(LOADER_PREFIX)


def company_files(config_dir: Path) -> list[Path]:
    # Every *.yaml entry, whatever it is: a broken or outward symlink, a FIFO or a directory
    # gets a loader too, so its refusal shows as that company's import error.
    return sorted(p for p in config_dir.iterdir()
                  if p.suffix in CONFIG_SUFFIXES and p.name != DEFAULTS_FILE)


def check_loaders(dags_dir: Path | str) -> LoaderCheck:
    """Compare the company files of ``dags_dir/config`` with the loaders of ``dags_dir``.
    Reads names only (cheap enough for every DAG-folder parse)."""
    dags = Path(dags_dir)
    configs = company_files(dags / "config") if (dags / "config").is_dir() else []
    companies = {p.stem for p in configs}
    loaders = sorted(dags.glob(f"{LOADER_PREFIX}*.py"))
    return LoaderCheck(
        dags_dir=dags,
        missing=tuple(p for p in configs if not loader_path(dags, p.stem).exists()),
        orphans=tuple(p for p in loaders if company_of(p) not in companies),
    )


def sync_loaders(dags_dir: Path | str, companies: Collection[str] | None = None
                 ) -> tuple[list[Path], list[Path], list[Path]]:
    """Write the missing loaders; remove orphans that are exactly a generated loader (a loader
    someone edited is kept and reported). Returns (written, removed, kept).

    ``companies`` limits both to those companies' loaders: a caller that owns only some
    companies of a shared folder leaves the others' alone (an orphan kept there on purpose,
    e.g. a removed company whose cleared tasks must still find their stand-in DAGs).
    A loader is written whole (renamed into place), so a parse never reads half of one."""
    check = check_loaders(dags_dir)
    wanted = None if companies is None else set(companies)
    written, removed, kept = [], [], []
    for config in check.missing:
        if wanted is not None and config.stem not in wanted:
            continue
        path = loader_path(check.dags_dir, config.stem)
        part = path.with_name(path.name + ".part")
        part.write_text(LOADER_TEMPLATE.format(company=config.stem, config=config.name))
        os.replace(part, path)
        written.append(path)
    for loader in check.orphans:
        if wanted is not None and company_of(loader) not in wanted:
            continue
        generated = {LOADER_TEMPLATE.format(company=company_of(loader), config=company_of(loader)
                                            + suffix) for suffix in CONFIG_SUFFIXES}
        if loader.read_text() in generated:
            loader.unlink()
            removed.append(loader)
        else:
            kept.append(loader)
    return written, removed, kept


def removed_company(dags_dir: Path | str, company: str) -> str | None:
    """Why a task of ``company`` cannot run when its company file is gone, else None.

    One line naming the company and the file (relative to the project, e.g.
    ``dags/config/acme.yaml``): runs registered before the removal are neither rendered,
    published nor delivered.
    """
    config = Path(dags_dir) / "config"
    if any((config / f"{company}{suffix}").is_file() for suffix in CONFIG_SUFFIXES):
        return None
    shown = Path(Path(dags_dir).name) / "config" / f"{company}.yaml"
    return (f"company {company!r} was removed from the config ({shown} is gone): this run is not "
            f"rendered, published or delivered; restore {shown} to export it")


# --- The shape of a company's DAGs, remembered for after its removal -------------------------
# When a company file is deleted, the dag-processor's next parse would produce no DAGs for its
# loader; Airflow then marks them stale and never runs a task of theirs again, so a cleared task
# sits queued forever with no word why. Each full parse therefore records the company's DAG ids
# and task graph; after the removal the loader rebuilds the same DAG ids and task ids from this
# record, every task failing at once with the one removal line (ADR 0006's "bad input" case).
DAG_INDEX_ENV = settings.DAG_INDEX_ENV
TaskGraph = dict[str, list[str]]  # task id → its upstream task ids


def dag_index_dir(dags_dir: Path | str, environ: Mapping[str, str] | None = None
                  ) -> Path | None:
    """Where the record of ``dags_dir``'s companies lives: under ``$EXPORT_DAG_INDEX_DIR``, else
    ``$AIRFLOW_HOME/export_dag_index`` (the dag-processor's own writable home; the dags folder
    may be mounted read-only), in a subdirectory per dags folder, so two folders parsed with
    one home (a copy, a test) never answer for each other's companies."""
    base = settings.dag_index_base(environ)
    if base is None:
        return None
    folder = str(Path(dags_dir).resolve())
    return base / hashlib.sha256(folder.encode()).hexdigest()[:16]


def record_company_dags(index_dir: Path, company: str, dags: Mapping[str, TaskGraph]) -> bool:
    """Remember ``company``'s DAGs (dag id → task graph); writes only when they changed and
    atomically (a parse never sees half a file). Returns whether it wrote."""
    path = index_dir / f"{company}.json"
    text = json.dumps({dag: dict(sorted(graph.items())) for dag, graph in sorted(dags.items())},
                      indent=1, sort_keys=True)
    try:
        if path.read_text() == text:
            return False
    except OSError:
        pass
    index_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return True


def recorded_company_dags(index_dir: Path | None, company: str) -> dict[str, TaskGraph]:
    """The DAGs last recorded for ``company`` ({} when never recorded or unreadable)."""
    if index_dir is None:
        return {}
    try:
        data = json.loads((index_dir / f"{company}.json").read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(dag): {str(t): [str(u) for u in ups] for t, ups in graph.items()}
            for dag, graph in data.items() if isinstance(graph, dict)}
