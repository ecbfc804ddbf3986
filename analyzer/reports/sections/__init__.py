"""The report's sections, one module each, built from one :class:`~analyzer.analysis.Analysis` into the
view model's types (:mod:`analyzer.reports.viewmodel`); :mod:`analyzer.reports.build` puts them
together.

``common`` (reading facts, capped tables, column kinds and labels), ``findings`` (findings table, verdict),
``timeline`` (utilization chart, idle gaps), ``kernels`` (categories, top kernels, NVTX ranges),
``breakdown``, ``phases``, ``memory``, ``signals`` (call sites, GPU metrics, energy), ``ncu``.
"""
