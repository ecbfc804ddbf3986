"""GPU-profile expert system: diagnoses Nsight Systems traces (and Nsight Compute metrics).

Layers, each a sub-package:

- ``analyzer.loading``  formats (nsys SQLite / .nsys-rep, ncu CSV / .ncu-rep) -> one :class:`Trace` model
- ``analyzer.facts``    derived tables (busy intervals, categories, occupancy, NVTX projection ...)
- ``analyzer.rules``    the safe YAML rule engine and the default rule pack
- ``analyzer.phases``   phase tables and sweep tables over NVTX ranges
- ``analyzer.reports``  view models and HTML / Markdown / JSON renderings
- ``analyzer.cli``      the thin ``analyze`` command
"""

__version__ = "0.1.0"
