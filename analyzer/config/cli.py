"""Configuration files for every command, through click's own ``default_map``.

Every command built with :class:`ConfigCommand` (the default command class of ``analyze`` and of its
groups) reads the project configuration (:mod:`analyzer.config.project`) before parsing its
arguments: a key is the long name of one of its options (``fail-on`` for ``--fail-on``), its value
becomes that option's default, and the command line wins. An option added to a command later is a
configuration key at once, with its type checked the same way; nothing per option is needed, except
to mark the few options that make no sense in a file (:class:`CliOnlyOption`) and the repeatable ones
whose file and command-line values both apply, file first (:class:`LayeredOption`: ``--select``,
``--ignore``, ``--set``).

Relative paths in a configuration file are relative to its folder (options of type ``click.Path``,
and types with a ``from_config(value, base)`` method such as the pack reference of ``--rules``).
``--config FILE`` names the file, ``--isolated`` reads none.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from analyzer.config.project import ProjectConfig, display_path, find_config, read_config
from analyzer.errors import ConfigError, did_you_mean

META_KEY = "analyzer.config"


class CliOnlyOption(click.Option):
    """An option that is never read from a configuration file (``--config``, ``--write-accepted``)."""


class LayeredOption(click.Option):
    """A repeatable option whose configuration values and command-line values both apply, the file's
    first (``--ignore X`` adds to the file's ``ignore``). Commands read both with :func:`layers`."""


@dataclass(frozen=True)
class Settings:
    """What configuration applies to this run and why."""

    config: ProjectConfig | None
    how: str  # "found" | "--config" | "--isolated" | "none"
    searched_from: Path

    def describe(self) -> str:
        if self.config is not None:
            via = "given with --config" if self.how == "--config" else "found from the working directory"
            return f"{self.config.label} ({via})"
        if self.how == "--isolated":
            return "none (--isolated)"
        return f"none found from {display_path(self.searched_from)} upwards"


def config_key(param: click.Parameter) -> str | None:
    """The configuration key of an option: its long name without dashes (None: not configurable)."""
    if not isinstance(param, click.Option) or isinstance(param, CliOnlyOption) or param.hidden:
        return None
    if param.name in ("help", "version"):
        return None
    longs = [o[2:] for o in param.opts if o.startswith("--")]
    return max(longs, key=len) if longs else None


def iter_commands(command: click.Command, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """``command`` and every subcommand below it, with their paths (``("rules", "list")``)."""
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            yield from iter_commands(sub, (*path, name))


def known_keys(root: click.Command) -> dict[str, list[str]]:
    """Configuration key -> the commands that read it (``analyze``, ``analyze rules list``...): the
    options of every :class:`ConfigCommand` at or below ``root``."""
    keys: dict[str, list[str]] = {}
    for path, command in iter_commands(root):
        if not isinstance(command, ConfigCommand):
            continue
        for param in command.params:
            key = config_key(param)
            if key:
                keys.setdefault(key, []).append(" ".join(("analyze", *path)))
    return keys


class ConfigCommand(click.Command):
    """A command whose option defaults come from the project configuration (see the module
    docstring). Adds ``--config FILE`` and ``--isolated`` (read before parsing; the callback does not
    receive them). ``config_section``: the per-command table it reads (default: its own name under
    ``analyze``; ``analyze config`` reads ``run``'s, as it shows what a run would use)."""

    config_section: str | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        names = {p.name for p in self.params}
        if "config_file" not in names:
            self.params.append(CliOnlyOption(
                ["--config", "config_file"], type=click.Path(path_type=Path), default=None, metavar="FILE",
                expose_value=False,
                help="Project configuration to use (pyproject.toml or gpu-trace-analyzer.toml). Default: "
                     "the first found from the working directory upwards."))
        if "isolated" not in names:
            self.params.append(CliOnlyOption(
                ["--isolated"], is_flag=True, default=False, expose_value=False,
                help="Read no configuration file: command-line options and built-in defaults only."))

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not ctx.resilient_parsing and not _asks_for_help(ctx, args):
            settings = load_settings(ctx, self, args)
            ctx.meta[META_KEY] = settings
            if settings.config is not None:
                ctx.default_map = {**(ctx.default_map or {}), **defaults_for(self, ctx, settings.config)}
        return super().parse_args(ctx, args)


class ConfigGroup(click.Group):
    """A group whose subcommands are :class:`ConfigCommand` by default; a mistyped subcommand is
    answered with the closest one (``analyze rules lst``: did you mean "list"?)."""

    command_class = ConfigCommand

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            hint = did_you_mean(name, self.list_commands(ctx))
            if hint:
                ctx.fail(f"no such command '{name}'; {hint}")
        return super().resolve_command(ctx, args)


ConfigGroup.group_class = ConfigGroup


def _asks_for_help(ctx: click.Context, args: Sequence[str]) -> bool:
    for arg in args:
        if arg == "--":
            return False
        if arg in ctx.help_option_names:
            return True
    return False


def load_settings(ctx: click.Context, command: click.Command, args: Sequence[str]) -> Settings:
    """The configuration for this invocation: ``--isolated``, ``--config FILE`` or the one found from the
    working directory upwards. Its keys are checked against every command's options."""
    cwd = Path.cwd()
    try:
        opts, _, _ = command.make_parser(ctx).parse_args(args=list(args))
    except click.UsageError:  # reported by the real parse, after this
        opts = {}
    explicit, isolated = opts.get("config_file"), bool(opts.get("isolated"))
    if explicit and isolated:
        raise click.UsageError("--config and --isolated exclude each other: pick one", ctx=ctx)
    if isolated:
        return Settings(None, "--isolated", cwd)
    if explicit:
        path = Path(str(explicit)).expanduser()
        if not path.exists():
            raise ConfigError("no such configuration file", file=str(path), hint="check the --config path")
        config, how = read_config(path), "--config"
    else:
        found = find_config(cwd)
        if found is None:
            return Settings(None, "none", cwd)
        config, how = read_config(found), "found"
    root = ctx.find_root().command
    check_keys(config, root)
    section = getattr(command, "config_section", None) or _top_command(ctx)
    return Settings(for_command(config, root, section), how, cwd)


def _sections(root: click.Command) -> dict[str, click.Command]:
    """Per-command tables a configuration may hold: one per subcommand of ``analyze``."""
    return dict(root.commands) if isinstance(root, click.Group) else {}


def _top_command(ctx: click.Context) -> str | None:
    """The name of the ``analyze`` subcommand this context runs (``rules`` for ``analyze rules list``)."""
    current = ctx
    while current.parent is not None and current.parent.parent is not None:
        current = current.parent
    return current.info_name if current.parent is not None else None


def for_command(config: ProjectConfig, root: click.Command, name: str | None) -> ProjectConfig:
    """``config`` as command ``name`` reads it: the shared keys, overlaid by its own table
    (``[tool.gpu-trace-analyzer.diff]``), without the other commands' tables."""
    sections = _sections(root)
    own = config.section(name) if name in sections else None
    empty = ProjectConfig(path=config.path, table=config.table)
    return config.merged(own or empty, [s for s in sections if isinstance(config.values.get(s), dict)])


def check_keys(config: ProjectConfig, root: click.Command) -> None:
    """Every key must be some command's option, or a table of options of one command (``[...diff]``);
    errors name file, line and a did-you-mean."""
    keys = known_keys(root)
    sections = _sections(root)
    for key, value in config.values.items():
        # a command's name is its table, unless the same word is also an option given a plain value
        # (``rules = ["default", ...]`` is the --rules option, not the ``analyze rules`` command)
        if key in sections and (isinstance(value, dict) or key not in keys):
            section = config.section(str(key))
            if section is None:
                raise config.error(str(key), f'"{key}" names the {key} command: its settings are a table',
                                   f"write [{'.'.join((*config.table, str(key)))}] with {key}'s options")
            own = known_keys(sections[str(key)])
            for sub in section.values:
                if sub not in own:
                    hint = did_you_mean(str(sub), own) or (
                        f"{key} reads: {', '.join(sorted(own))}" if own else f"{key} reads no configuration")
                    raise section.error(str(sub), f'unknown key "{sub}" for analyze {key}', hint)
            continue
        if key not in keys:
            hint = did_you_mean(str(key), keys) or f"keys: {', '.join(sorted(keys))}"
            raise config.error(str(key), f'unknown key "{key}"', hint)


def defaults_for(command: click.Command, ctx: click.Context, config: ProjectConfig) -> dict[str, Any]:
    """``{parameter name: value}`` from ``config`` for ``command``'s options (layered ones excluded:
    :func:`layers` reads them), each checked against the option's type."""
    out: dict[str, Any] = {}
    for param in command.params:
        key = config_key(param)
        if key is None or key not in config.values:
            continue
        value = convert(param, key, config.values[key], config, ctx)
        if not isinstance(param, LayeredOption):
            out[str(param.name)] = value
    return out


def convert(param: click.Parameter, key: str, value: Any, config: ProjectConfig, ctx: click.Context) -> Any:
    """``value`` from the file as the option would take it from the command line: lists for repeatable
    options (a single value is a list of one), paths relative to the file's folder, the type checked."""
    assert isinstance(param, click.Option)
    if param.multiple:
        items = list(value) if isinstance(value, (list, tuple)) else [value]
        for item in items:
            if isinstance(item, (dict, list)):
                raise config.error(key, f"{key}: each value must be text or a number, not {_toml_kind(item)}")
            _check_scalar(param, key, item, config)
        value = [_relative(param, item, config.base) for item in items]
    else:
        if isinstance(value, (dict, list)):
            raise config.error(key, f"{key} takes one value, not {_toml_kind(value)}",
                               f"write {key} = \"...\"" if not param.is_flag else f"write {key} = true")
        if param.is_flag and not isinstance(value, bool):
            raise config.error(key, f"{key} is a switch: write {key} = true or false, not {value!r}")
        if not param.is_flag:
            _check_scalar(param, key, value, config)
        value = _relative(param, value, config.base)
    try:
        param.type_cast_value(ctx, value)
    except click.BadParameter as err:
        raise config.error(key, f"{key}: {err.message.rstrip('.')}") from None
    except (TypeError, ValueError) as err:  # a type that expects command-line text
        raise config.error(key, f"{key}: {value!r} is not a valid value ({err})") from None
    return value


def _check_scalar(param: click.Option, key: str, value: Any, config: ProjectConfig) -> None:
    """Values are text or numbers, as on a command line; paths are text."""
    if _is_path(param) and not isinstance(value, str):
        raise config.error(key, f"{key}: expected a path (text in quotes), not {value!r}")
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise config.error(key, f"{key}: expected text or a number, not {value!r}")


def _toml_kind(value: Any) -> str:
    return "a table" if isinstance(value, dict) else "a list"


def _relative(param: click.Option, value: Any, base: Path) -> Any:
    if not isinstance(value, str) or not value:
        return value
    hook = getattr(param.type, "from_config", None)
    if hook is not None:
        return hook(value, base)
    if isinstance(param.type, click.Path) and value != "-":
        path = Path(value).expanduser()
        return str(path if path.is_absolute() else base / path)
    return value


# ---------------------------------------------------------------------------------------------------
# what commands ask


def settings_of(ctx: click.Context) -> Settings:
    """The configuration this invocation read (``Settings(None, "none")`` outside a ConfigCommand)."""
    current: click.Context | None = ctx
    while current is not None:
        if META_KEY in current.meta:
            return current.meta[META_KEY]  # type: ignore[no-any-return]
        current = current.parent
    return Settings(None, "none", Path.cwd())


def origin(ctx: click.Context, name: str) -> str:
    """Where parameter ``name``'s value came from: ``command line``, ``pyproject.toml:12`` or ``default``."""
    source = ctx.get_parameter_source(name)
    if source == ParameterSource.COMMANDLINE:
        return "command line"
    if source == ParameterSource.ENVIRONMENT:
        return "environment"
    config = settings_of(ctx).config
    param = _param(ctx, name)
    key = config_key(param) if param is not None else None
    from_file = source == ParameterSource.DEFAULT_MAP or isinstance(param, LayeredOption)
    if config is not None and key is not None and key in config.values and from_file:
        return config.origin(key)
    return "default"


def _param(ctx: click.Context, name: str) -> click.Parameter | None:
    return next((p for p in ctx.command.params if p.name == name), None)


@dataclass(frozen=True)
class Layer:
    """A layered option's values from one place."""

    values: tuple[Any, ...]
    origin: str  # "pyproject.toml:12" | "command line"
    given: bool  # False: the place did not set the option at all


def layers(ctx: click.Context, name: str) -> tuple[Layer, Layer]:
    """(configuration file, command line) values of the layered option ``name``; the command line's
    ``given`` is False unless it was on the command line."""
    param = _param(ctx, name)
    config = settings_of(ctx).config
    key = config_key(param) if param is not None else None
    file_layer = Layer((), "configuration", False)
    if param is not None and config is not None and key is not None and key in config.values:
        value = convert(param, key, config.values[key], config, ctx)
        cast = param.type_cast_value(ctx, value)
        file_layer = Layer(tuple(cast), config.origin(key), True)
    given = ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE
    cli_value = ctx.params.get(name) or ()
    return file_layer, Layer(tuple(cli_value) if given else (), "command line", given)


def effective(ctx: click.Context) -> list[tuple[str, str, str]]:
    """(key, value, where from) for every configurable option of the command, for ``analyze config``."""
    rows: list[tuple[str, str, str]] = []
    for param in ctx.command.params:
        key = config_key(param)
        if key is None or param.name is None:
            continue
        if isinstance(param, LayeredOption):
            file_layer, cli_layer = layers(ctx, param.name)
            shown = False
            for layer in (file_layer, cli_layer):
                if layer.given:
                    rows.append((key, _show(layer.values), layer.origin))
                    shown = True
            if not shown:
                rows.append((key, "-", "default"))
            continue
        value = ctx.params.get(param.name)
        if _is_path(param) and value:
            value = [display_path(v) for v in value] if isinstance(value, (list, tuple)) else display_path(value)
        rows.append((key, _show(value), origin(ctx, param.name)))
    return rows


def _is_path(param: click.Parameter) -> bool:
    return isinstance(param.type, click.Path) or hasattr(param.type, "from_config")


def _show(value: Any) -> str:
    if value is None or value == () or value == []:
        return "-"
    if isinstance(value, (list, tuple)):
        return ", ".join(_show(v) for v in value)
    if isinstance(value, Path):
        return display_path(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def describe_settings(ctx: click.Context) -> str:
    return settings_of(ctx).describe()


__all__ = [
    "CliOnlyOption", "ConfigCommand", "ConfigGroup", "Layer", "LayeredOption", "Settings", "config_key",
    "describe_settings", "effective", "known_keys", "layers", "origin", "settings_of",
]
