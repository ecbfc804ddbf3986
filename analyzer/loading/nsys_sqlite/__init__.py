"""Nsight Systems SQLite export -> :class:`~analyzer.loading.model.Trace`.

Schema detection, not version switches: the export's tables and columns move between nsys releases
(2020.3 has no metadata table and inline NVTX text, 2022.4/2023.1 call the metadata ``EXPORT_META_DATA``,
later releases ``META_DATA_EXPORT``; ``greenContextId``, ``textId``, ``jsonTextId``, ``domainId`` come
and go). Every query selects only columns that ``PRAGMA table_info`` lists; a missing optional table
becomes an empty frame.

Times: nsys stores nanoseconds on the session clock. The origin is ``ANALYSIS_DETAILS.startTime`` when
the events lie inside ``[startTime, stopTime]`` (2022.4 and 2025.3 exports), ``0`` when the export's
events are already session-relative (2023.1 exports whose ``ANALYSIS_DETAILS`` uses another clock base),
the session start (``TARGET_INFO_SESSION_START_TIME``) when timestamps were exported as UTC
(``--ts-normalize``), else the earliest event (2020.3 exports have no ``ANALYSIS_DETAILS``).

Stages: (1) fetch integer columns of every table we use, concurrently on the ADBC backend
(:mod:`analyzer.loading.sqlite_reader`); (2) time base, trace-relative times; (3) NVTX nesting, paths and
per-thread step functions (:mod:`analyzer.loading.attribution`); (4) API frame with its own thread's
range; (5) GPU operations joined to their launching call on (pid, correlationId) and from it to the NVTX
range (thread, else process fallback); (6) GPUs, processes, threads. Strings are resolved once per
distinct ``StringIds`` id and shared between rows (object columns, as :func:`empty_frame` makes them).

The package: :mod:`~analyzer.loading.nsys_sqlite.schema` recognises the export and names what is read of
it, :mod:`~analyzer.loading.nsys_sqlite.decode` decodes strings, enums and integer cells, and
:mod:`~analyzer.loading.nsys_sqlite.loader` builds the trace model
(:func:`~analyzer.loading.nsys_sqlite.loader.load_nsys_sqlite`).
"""
