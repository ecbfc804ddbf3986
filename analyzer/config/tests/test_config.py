"""The project configuration: discovery from the working directory upwards, reading (pyproject table or
standalone file), key lines, and the click plumbing that turns keys into option defaults for any
command, including options added later."""
from __future__ import annotations

import os
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from analyzer.config.cli import ConfigGroup, LayeredOption, effective, layers, origin
from analyzer.config.project import TABLE, find_config, key_lines, read_config
from analyzer.errors import AnalyzerError, ConfigError


@pytest.fixture()
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty project folder as the working directory (with a nested ``src/pkg``)."""
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_discovery_walks_up_and_prefers_the_standalone_file(project: Path) -> None:
    deep = project / "src" / "pkg"
    assert find_config(deep) is None
    (project / "pyproject.toml").write_text('[project]\nname = "x"\n')  # another tool's: passed over
    assert find_config(deep) is None
    (project / "pyproject.toml").write_text('[project]\nname = "x"\n[tool.gpu-trace-analyzer]\nfail-on = "error"\n')
    assert find_config(deep) == project / "pyproject.toml"
    (project / "src" / "gpu-trace-analyzer.toml").write_text('fail-on = "warning"\n')
    assert find_config(deep) == project / "src" / "gpu-trace-analyzer.toml"  # nearer wins
    (project / "src" / "pkg" / "pyproject.toml").write_text("[tool.gpu-trace-analyzer]\n")
    assert find_config(deep) == deep / "pyproject.toml"
    (deep / ".gpu-trace-analyzer.toml").write_text("")
    assert find_config(deep) == deep / ".gpu-trace-analyzer.toml"  # standalone before pyproject


def test_read_pyproject_and_standalone(project: Path) -> None:
    pyproject = project / "pyproject.toml"
    pyproject.write_text(
        '[project]\nname = "x"\n\n[tool.gpu-trace-analyzer]\nrules = ["default", "team.yaml"]\n'
        'ignore = [\n  "tiny-kernels",\n  "NCU*",\n]\n"fail-on" = "warning"\n\n[tool.ruff]\nselect = ["E"]\n'
    )
    config = read_config(pyproject)
    assert config.values == {"rules": ["default", "team.yaml"], "ignore": ["tiny-kernels", "NCU*"],
                             "fail-on": "warning"}
    assert config.lines == {"rules": 5, "ignore": 6, "fail-on": 10} and config.table_line == 4
    assert config.origin("ignore") == "pyproject.toml:6" and config.label == "pyproject.toml [tool.gpu-trace-analyzer]"
    standalone = project / "gpu-trace-analyzer.toml"
    standalone.write_text('# team settings\nwindow = "step_*"\nset = ["gpu-idle-gaps.min_gap=2ms"]\n')
    config = read_config(standalone)
    assert config.values == {"window": "step_*", "set": ["gpu-idle-gaps.min_gap=2ms"]}
    assert config.lines == {"window": 2, "set": 3} and config.table == ()


@pytest.mark.parametrize("name, text, words", [
    ("pyproject.toml", "[tool.gpu-trace-analyzer]\nfail-on = \n", ["pyproject.toml:2: invalid TOML"]),
    ("pyproject.toml", "[project]\nname = 'x'\n", ["has no [tool.gpu-trace-analyzer] table"]),
    ("pyproject.toml", "[tool]\ngpu-trace-analyzer = 3\n", ["must be a table of settings"]),
    ("gpu-trace-analyzer.toml", "[tool.gpu-trace-analyzer]\nfail-on = 'x'\n", ["top level", ":1:"]),
    ("gpu-trace-analyzer.toml", "a = 'x'\na = 'y'\n", ["invalid TOML", ":2:"]),
    ("gpu-trace-analyzer.toml", b"\xff\xfe\x00", ["not UTF-8"]),
    ("gpu-trace-analyzer.toml", "x = '" + "a" * (1 << 20) + "'\n", ["byte limit"]),
    ("gpu-trace-analyzer.toml", "fail_on = 1" + "0" * 5000 + "\n", ["cannot be read"]),  # exit 3 before
])
def test_bad_files_are_one_line_errors(project: Path, name: str, text: str | bytes, words: list[str]) -> None:
    path = project / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ConfigError) as err:
        read_config(path)
    message = str(err.value)
    assert "\n" not in message and all(w in message for w in words), message


def test_key_lines_skip_multiline_values() -> None:
    text = ('[tool.gpu-trace-analyzer]\nselect = [\n  ["nested"],\n  "x",\n]\ndoc = """\nignore = 1\n"""\n'
            "ignore = ['a']  # comment\n[tool.gpu-trace-analyzer.set]\n'gpu-idle-gaps.min_gap' = '2ms'\n")
    assert key_lines(text, TABLE) == ({"select": 2, "doc": 6, "ignore": 9, "set": 10}, 1)


# -- the click plumbing, on a small command tree -------------------------------------------------------


def make_cli(extra: list[click.Option] | None = None) -> click.Group:
    @click.group(cls=ConfigGroup)
    def root() -> None:
        pass

    @root.command("run")
    @click.option("--fail-on", type=click.Choice(["info", "warning", "error"]))
    @click.option("--output", "-o", type=click.Path())
    @click.option("--ignore", cls=LayeredOption, multiple=True)
    @click.option("--quiet", "-q", is_flag=True)
    @click.pass_context
    def run(ctx: click.Context, **params: object) -> None:
        file_layer, cli_layer = layers(ctx, "ignore")
        click.echo(f"fail_on={params['fail_on']} from {origin(ctx, 'fail_on')}")
        click.echo(f"output={params['output']} quiet={params['quiet']}")
        click.echo(f"ignore file={list(file_layer.values)} cli={list(cli_layer.values)}")
        for key, shown, where in effective(ctx):
            click.echo(f"effective {key}={shown} @ {where}")
        for name, value in params.items():
            if name not in ("fail_on", "output", "ignore", "quiet"):
                click.echo(f"{name}={value} from {origin(ctx, name)}")

    @root.command("diff")
    @click.option("--output", "-o", type=click.Path())
    @click.option("--fail-on-regression")
    @click.pass_context
    def diff(ctx: click.Context, output: str | None, fail_on_regression: str | None) -> None:
        click.echo(f"diff output={output} from {origin(ctx, 'output')}; regression={fail_on_regression}")

    for option in extra or []:
        run.params.append(option)
    return root


def invoke(root: click.Group, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(root, list(args), catch_exceptions=True)
    if isinstance(result.exception, AnalyzerError):
        return 2, f"error: {result.exception}"
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def test_keys_become_defaults_and_the_command_line_wins(project: Path) -> None:
    (project / "pyproject.toml").write_text(
        '[tool.gpu-trace-analyzer]\nfail-on = "warning"\noutput = "reports/gpu.md"\nignore = ["a", "b"]\n'
        "quiet = true\n")
    os.chdir(project / "src" / "pkg")
    code, out = invoke(make_cli(), "run")
    assert code == 0, out
    assert "fail_on=warning from ../../pyproject.toml:2" not in out  # shown relative only below the cwd
    assert f"fail_on=warning from {project / 'pyproject.toml'}:2" in out
    assert f"output={project / 'reports' / 'gpu.md'} quiet=True" in out  # relative to the file's folder
    assert "ignore file=['a', 'b'] cli=[]" in out
    code, out = invoke(make_cli(), "run", "--fail-on", "error", "-o", "x.md", "--ignore", "c")
    assert "fail_on=error from command line" in out and "output=x.md" in out
    assert "ignore file=['a', 'b'] cli=['c']" in out  # layered: both apply
    assert f"effective ignore=a, b @ {project / 'pyproject.toml'}:4" in out and "effective ignore=c @ command line" in out
    code, out = invoke(make_cli(), "run", "--isolated")
    assert "fail_on=None from default" in out and "ignore file=[] cli=[]" in out


def test_an_option_added_later_is_a_key_at_once(project: Path) -> None:
    (project / "gpu-trace-analyzer.toml").write_text('job = "slurm-1234"\nranks = [0, 3]\n')
    later = [click.Option(["--job"]), click.Option(["--ranks"], type=int, multiple=True)]
    code, out = invoke(make_cli(later), "run")
    assert code == 0 and "job=slurm-1234 from gpu-trace-analyzer.toml:1" in out and "ranks=(0, 3)" in out
    code, out = invoke(make_cli(), "run")  # the same file where no command has --job
    assert code == 2 and out.startswith('error: gpu-trace-analyzer.toml:1: unknown key "job"'), out


@pytest.mark.parametrize("text, words", [
    ('fail-on = "warn"\n', ["gpu-trace-analyzer.toml:1: fail-on:", "'warn' is not one of"]),
    ('fial-on = "warning"\n', ['gpu-trace-analyzer.toml:1: unknown key "fial-on"', 'did you mean "fail-on"?']),
    ('quiet = "yes"\n', ["gpu-trace-analyzer.toml:1: quiet is a switch"]),
    ('\n\nfail-on = ["warning"]\n', ["gpu-trace-analyzer.toml:3: fail-on takes one value, not a list"]),
    ('ignore = [{a = 1}]\n', ["ignore: each value must be text or a number, not a table"]),
    ('output = 5\n', ["gpu-trace-analyzer.toml:1: output: expected a path (text in quotes), not 5"]),
    ('fail-on = 2024-01-01\n', ["fail-on: expected text or a number, not datetime.date(2024, 1, 1)"]),
    ('ignore = [true]\n', ["ignore: expected text or a number, not True"]),
])
def test_bad_values_name_file_line_and_suggest(project: Path, text: str, words: list[str]) -> None:
    (project / "gpu-trace-analyzer.toml").write_text(text)
    code, out = invoke(make_cli(), "run")
    assert code == 2 and all(w in out for w in words), out


def test_config_flag_isolated_and_help(project: Path) -> None:
    (project / "pyproject.toml").write_text("[tool.gpu-trace-analyzer]\nfail-on = 'nonsense'\n")
    other = project / "ci.toml"
    other.write_text('fail-on = "error"\n')
    code, out = invoke(make_cli(), "run", "--config", str(other))
    assert code == 0 and "fail_on=error from ci.toml:1" in out  # the broken discovered file is not read
    code, out = invoke(make_cli(), "run", "--config", "missing.toml")
    assert code == 2 and "missing.toml: no such configuration file" in out
    code, out = invoke(make_cli(), "run", "--config", str(other), "--isolated")
    assert code == 2 and "exclude each other" in out
    code, out = invoke(make_cli(), "run", "--help")  # help never reads (or fails on) the configuration
    assert code == 0 and "--isolated" in out and "--config FILE" in out
    code, out = invoke(make_cli(), "run")
    assert code == 2 and "pyproject.toml:2: fail-on:" in out


def test_per_command_tables(project: Path) -> None:
    (project / "pyproject.toml").write_text(
        '[tool.gpu-trace-analyzer]\noutput = "reports/gpu.md"\nfail-on-regression = "5%"\n\n'
        '[tool.gpu-trace-analyzer.diff]\noutput = "reports/diff.md"\n')
    code, out = invoke(make_cli(), "run")
    assert code == 0 and f"output={project / 'reports' / 'gpu.md'}" in out
    code, out = invoke(make_cli(), "diff")
    assert code == 0, out
    assert f"diff output={project / 'reports' / 'diff.md'} from pyproject.toml:6; regression=5%" in out
    # a key of the table that the command does not have, and a table that is not one
    (project / "pyproject.toml").write_text('[tool.gpu-trace-analyzer.diff]\n\nouptut = "x"\n')
    code, out = invoke(make_cli(), "run")
    assert code == 2 and 'pyproject.toml:3: unknown key "ouptut" for analyze diff; did you mean "output"?' in out
    (project / "pyproject.toml").write_text('[tool.gpu-trace-analyzer]\ndiff = "x"\n')
    code, out = invoke(make_cli(), "run")
    assert code == 2 and 'pyproject.toml:2: "diff" names the diff command: its settings are a table' in out
    (project / "pyproject.toml").write_text('[tool.gpu-trace-analyzer]\ndiff = {output = "inline.md"}\n')
    code, out = invoke(make_cli(), "diff")
    assert code == 0 and "inline.md from pyproject.toml:2" in out


def test_analyze_config_shows_values_from_the_file_inert(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``analyze config`` printed a value as the file had it: a TOML ``"\\u001b]0;PWNED\\u0007"`` in
    ``window`` reached the terminal as an ESC sequence (setting its title). Now as U+FFFD."""
    from analyzer.cli import main

    (project / "pyproject.toml").write_text('[tool.gpu-trace-analyzer]\nwindow = "step_\\u001b]0;PWNED\\u0007"\n')
    rc = main(["config"])
    out = capsys.readouterr().out
    assert rc == 0 and "step_\ufffd]0;PWNED\ufffd" in out and "\x1b" not in out and "\x07" not in out, out
