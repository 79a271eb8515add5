"""Read models for people: what the UI pages, ``exportctl runs`` and the metrics show.

``reports`` (the runs page, ``exportctl runs``), ``obligations`` (what each schedule owed and
what happened), ``run_detail`` (one run in full, and the operator actions it offers),
``run_metrics`` (what the run metrics are read from) and ``visibility`` (which companies a
reader may see). They read the ledger and the catalog; they sit above the pipeline (the
layers are in ``docs/explanation/architecture.md`` and ``.importlinter``), so nothing below imports them.
"""
