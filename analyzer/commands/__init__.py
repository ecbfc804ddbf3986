"""Subcommands of ``analyze`` that are no application package of their own (``analyze rules ...``).

They sit above the whole analysis (:mod:`analyzer.pipeline`): ``analyze rules test`` runs the rules'
inline cases as ``analyze`` runs a trace. Mounted by :mod:`analyzer.cli`.
"""
