"""Option defaults from the environment and an optional config file, given to Click as its default_map.

Part of the command-line layer: it reads Click's option definitions to know the names and check the values.
Precedence, highest first: the command line; NEARDUP_<COMMAND>_<OPTION>; NEARDUP_<OPTION>; the config file's
[command] table; its top level; the built-in default. A key is an option's long name (`threshold`, `num-perm` or
`num_perm`, `print`, `format`, `k`). Options of every command (`jobs`, `format`, `workdir`, ...) are set at the top
level only: a value per command could undo one given before the command on the command line.

Click's own auto_envvar_prefix is not used: it names a subcommand's variable NEARDUP_RUN_THRESHOLD only, and a
chained command's common options would then override the same option given to the group on the command line.
"""
from __future__ import annotations

import dataclasses
import os
import tomllib
from pathlib import Path
from typing import cast

import click
from click.core import ParameterSource

from ..errors import ParameterError

ENV_PREFIX = "NEARDUP_"
META_KEY = "neardup.settings"
NOT_OPTIONS = {"help", "version", "config"}  # keys that are no setting
_UNSET = getattr(click.core, "UNSET", None)  # Click >= 8.3's "no default" (None before)

ENVIRONMENT_HELP = """NEARDUP_<OPTION> (NEARDUP_THRESHOLD=0.9, NEARDUP_NUM_PERM=256, NEARDUP_FORMAT=jsonl) sets the
default of that option for every command that has it; NEARDUP_<COMMAND>_<OPTION> (NEARDUP_RUN_THRESHOLD) for one
command, and wins. Flags take 1/0, true/false; repeatable options a blank-separated list. The command line wins over
both. NEARDUP_CONFIG names the config file. XDG_CONFIG_HOME and XDG_CACHE_HOME move the config file and the cache.
NEARDUP_CACHE_MAX_SIZE caps the cache. _NEARDUP_COMPLETE=bash_source (zsh_source, fish_source) prints the shell
completion script."""
FILES_HELP = """$XDG_CONFIG_HOME/neardup/config.toml (default ~/.config/neardup/config.toml): option defaults, one
key per option (threshold = 0.9), and [command] tables for one command ([run] keep = "oldest,alpha").
$XDG_CACHE_HOME/neardup/ (default ~/.cache/neardup/): the work dirs of `run` without -w; see `neardup cache`."""


@dataclasses.dataclass
class Settings:
    path: Path  # the config file
    found: bool  # whether it exists (the default file is optional)
    default_map: dict  # Click's: group options at the top, {command: {param name: value}} for the commands
    sources: dict  # (command, or None for the group's options; param name) -> where the value came from

    def value(self, command: str, name: str, default=None):
        return self.default_map.get(command, {}).get(name, default)


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "neardup" / "config.toml"


def option_key(param: click.Parameter) -> str | None:
    """The name a config file and the environment use for an option: its long name, else its short one."""
    if not isinstance(param, click.Option):
        return None
    names = [o.lstrip("-") for o in param.opts if o.startswith("--")] or [o.lstrip("-") for o in param.opts]
    key = max(names, key=len)
    return None if key in NOT_OPTIONS else key


def _keys(command: click.Command, skip=()) -> dict[str, click.Parameter]:
    return {key: p for p in command.params if (key := option_key(p)) is not None and key not in skip}


def _convert(command: click.Command, param: click.Parameter, value, where: str, from_env: bool):
    if param.multiple and isinstance(value, str):
        value = param.type.split_envvar_value(value) if from_env else [value]
    try:
        return param.type_cast_value(click.Context(command), value)
    except click.BadParameter as e:
        raise ParameterError(f"{where}: {' '.join(e.message.split())}") from None


def _read_file(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ParameterError(f"{path}: not valid TOML: {e}") from None
    except OSError as e:
        raise ParameterError(f"{path}: cannot read the config file: {e.strerror}") from None


def resolve(group: click.Group, path: Path, found: bool, environ=os.environ) -> Settings:
    """The defaults that the config file at `path` (if found) and the environment give to every command."""
    group_keys = _keys(group)
    command_keys = {name: _keys(cmd, skip=group_keys) for name, cmd in group.commands.items()}
    default_map: dict = {}
    sources: dict = {}

    def put(command: str | None, key: str, value, source: str, where: str, from_env: bool = False) -> None:
        """Set a default; source says where it came from (for `config show`), where names it in an error."""
        owner = group if command is None else group.commands[command]
        param = (group_keys if command is None else command_keys[command])[key]
        default_map_of = default_map if command is None else default_map.setdefault(command, {})
        default_map_of[param.name] = _convert(owner, param, value, where, from_env)
        sources[(command, param.name)] = source

    table = _read_file(path) if found else {}
    tables = {}
    for raw_key, value in table.items():
        key = raw_key.replace("_", "-")
        where = f"{path}: {raw_key}"
        if isinstance(value, dict):
            if raw_key not in command_keys:
                raise ParameterError(f"{where}: no command {raw_key!r}; tables are commands: "
                                     f"{', '.join(sorted(c for c in command_keys if command_keys[c]))}")
            tables[raw_key] = value
        elif key in group_keys:
            put(None, key, value, f"config file {path}", where)
        else:
            owners = [c for c, keys in command_keys.items() if key in keys]
            if not owners:
                raise ParameterError(f"{where}: no option --{key} in any command (see `neardup help COMMAND`)")
            for command in owners:
                put(command, key, value, f"config file {path}", where)
    for command, values in tables.items():
        for raw_key, value in values.items():
            key, where = raw_key.replace("_", "-"), f"{path}: [{command}] {raw_key}"
            if key in group_keys:
                raise ParameterError(f"{where}: --{key} is an option of every command; set it at the top level")
            if key not in command_keys[command]:
                raise ParameterError(f"{where}: `neardup {command}` has no option --{key}")
            put(command, key, value, f"config file {path} [{command}]", where)
    for key in group_keys:
        name = ENV_PREFIX + key.replace("-", "_").upper()
        if name in environ:
            put(None, key, environ[name], f"environment {name}", f"environment {name}", from_env=True)
    for command, keys in command_keys.items():
        for key in keys:
            for name in (ENV_PREFIX + key.replace("-", "_").upper(),
                         ENV_PREFIX + f"{command}_{key}".replace("-", "_").upper()):  # the specific one wins
                if name in environ:
                    put(command, key, environ[name], f"environment {name}", f"environment {name}", from_env=True)
    return Settings(path, found, default_map, sources)


def load(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """Callback of the group's eager --config option: resolve the defaults before any other option is read."""
    path = Path(value) if value else config_path()
    if value and not path.is_file():
        raise ParameterError(f"{path}: no such config file (given by --config or NEARDUP_CONFIG)")
    settings = resolve(cast(click.Group, ctx.command), path, path.is_file())  # --config is the group's option
    ctx.default_map = settings.default_map
    ctx.meta[META_KEY] = settings


def given(ctx: click.Context, name: str) -> bool:
    """Whether the option `name` was given on the command line, to this command or before it."""
    return ParameterSource.COMMANDLINE in (ctx.get_parameter_source(name), ctx.find_root().get_parameter_source(name))


def of(ctx: click.Context) -> Settings | None:
    return ctx.find_root().meta.get(META_KEY)


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value)


def show(root: click.Context, commands: list[str]) -> list[str]:
    """Every effective default as TOML lines (a valid config file), each with where it came from."""
    current = of(root)
    assert current is not None  # set by load(), the group's eager --config callback
    lines = [f"# config file: {current.path}" + ("" if current.found else " (not found)")]

    def line(command: str | None, param: click.Parameter, given_value=None) -> str:
        key = option_key(param)
        if command is None and root.get_parameter_source(param.name) == ParameterSource.COMMANDLINE:
            value, where = given_value, "command line"
        elif (command, param.name) in current.sources:
            value = current.default_map[param.name] if command is None else current.default_map[command][param.name]
            where = current.sources[(command, param.name)]
        else:
            value = param.get_default(click.Context(group if command is None else group.commands[command]))
            where = "default"
        if value in (None, _UNSET, ()):
            return f"# {key} is not set  # {where}"
        return f"{key} = {_toml(value)}  # {where}"

    group = cast(click.Group, root.command)
    options = [p for p in group.params if option_key(p) and not getattr(p, "hidden", False)]
    lines += [line(None, p, getattr(root.obj, p.name, None)) for p in options]
    group_names = {p.name for p in options}
    for name in commands:
        own = [p for p in group.commands[name].params
               if option_key(p) and not getattr(p, "hidden", False) and p.name not in group_names]
        if own:
            lines += ["", f"[{name}]", *(line(name, p) for p in own)]
    return lines
