"""Project configuration: ``[tool.gpu-trace-analyzer]`` in ``pyproject.toml`` or a standalone
``gpu-trace-analyzer.toml``, found from the working directory upwards (:mod:`.project`); its keys are
the commands' long option names, fed to click as option defaults (:mod:`.cli`); the option groups the
analyzing commands share (:mod:`.options`); ``analyze config`` (:mod:`.show`)."""
