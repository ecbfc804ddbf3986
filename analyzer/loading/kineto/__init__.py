"""torch.profiler (Kineto) Chrome-trace JSON -> :class:`~analyzer.loading.model.Trace`.

``torch.profiler`` writes one JSON document per process (``tensorboard_trace_handler`` names them
``HOST_PID.TIMESTAMP.pt.trace.json``, optionally gzipped), each ``{"schemaVersion", "deviceProperties",
"distributedInfo", ..., "traceEvents": [...]}``. Two generations of event vocabulary exist and both load:

=========================  ==============================================  ===========================
what                       current (PyTorch 1.9+, ``ActivityType.h``)       2021 (PyTorch 1.8)
=========================  ==============================================  ===========================
CPU ops / record_function  ``cpu_op``, ``user_annotation``                 ``Operator``
CUDA API calls             ``cuda_runtime``, ``cuda_driver``               ``Runtime``
GPU work                   ``kernel``, ``gpu_memcpy``, ``gpu_memset``      ``Kernel``, ``Memcpy``, ``Memset``
launch flows               ``ac2g`` (2023+), ``async_cpu_to_gpu`` (2022)   ``async``, ``async_gpu``
timestamps                 us with ns decimals, relative to                integer us since the epoch
                           ``baseTimeNanoseconds`` (2024+), else epoch us
=========================  ==============================================  ===========================

What becomes what (the same model the nsys loader fills, so every fact and rule reads it unchanged):

* ``kernel``/``gpu_memcpy``/``gpu_memset`` -> kernels / memcpy / memset. Device and stream come from
  ``args`` (``device``, ``stream``), else from the event's pid/tid (``"stream 7"``). Copy direction and
  host memory kind come from Kineto's names (``Memcpy HtoD (Pageable -> Device)``, ``Memset (Device)``).
  Kineto records a kernel's static + dynamic shared memory as one number (``shared memory``): it is
  stored as ``dynamic_smem`` (``static_smem`` 0; occupancy uses the sum).
* ``cuda_runtime``/``cuda_driver`` -> API calls; every GPU operation is joined to its launching call on
  ``args.correlation`` (CUPTI's correlation id), or, where an event lacks it, on the id of the launch
  flow (``ac2g`` ...) that binds to it.
* ``cpu_op``/``user_annotation`` (``Operator``) -> ranges, exactly what NVTX ranges are for nsys:
  nested per thread by containment, ``ProfilerStep#N`` among them (the analysis window picks those).
  PyTorch runs backward ops on its autograd thread; a range that is outermost on such a secondary
  thread is nested under the innermost range of the process's main thread that encloses it, so
  ``ProfilerStep#3/backward/autograd::engine::evaluate_function: MmBackward0/...`` is one path, as the
  nsys loader's process fallback attributes backward kernels to the main thread's ``backward`` range.
  ``python_function`` events (``with_stack=True``) are not ranges (one per Python call): they give
  each CUDA API call its Python call stack (``stacks``/``api_stacks``, source ``python``: the frames
  open on the calling thread when the call started; :mod:`analyzer.loading.python_stacks`).
* A collective's NCCL kernel carries what c10d knows of it: the optional kernel columns ``comm_bytes``
  (NCCL's message size: count x element size) and ``comm_group`` (process group name), present only
  when some kernel of the trace has them (:func:`~analyzer.loading.kineto.columns.comm_columns`).
* ``cuda_sync`` -> synchronization rows; ``deviceProperties`` -> GPUs (per-SM limits Kineto leaves out
  come from the compute-capability table); ``process_name``/``thread_name`` metadata -> processes and
  threads; ``distributedInfo`` -> ``TraceInfo.rank`` / ``world_size``.

Times are parsed from the JSON text to exact integer nanoseconds (a float64 cannot hold an epoch
timestamp in microseconds to the nanosecond, nor the 2024+ relative ones above ~52 days); the trace
origin is the earliest event, ``TraceInfo.origin_ns`` that instant in epoch nanoseconds.

Parsing streams: the decompressed text is read in blocks, the ``traceEvents`` array cut into chunks of
whole events, each chunk decoded by ``msgspec`` into typed structs that keep only the fields read here
(large ``args`` such as ``Input Dims`` or ``Call stack`` are skipped, not built) and at once turned
into the columns of its event kind; no event object outlives its chunk and the text is never held
whole, so memory grows with the columns, not with the JSON. A file the stream gives up on (an
unexpected layout, damaged text) is decoded whole, which names what is wrong with it. Every malformed
input is an :class:`~analyzer.errors.InputError` with one line saying what is wrong.

The package: :mod:`~analyzer.loading.kineto.document` recognises and decodes the file,
:mod:`~analyzer.loading.kineto.columns` turns decoded events into columns, and
:mod:`~analyzer.loading.kineto.loader` builds the trace model
(:func:`~analyzer.loading.kineto.loader.load_kineto`).
"""
