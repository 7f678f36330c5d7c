"""Finding the tool modules under the functions directory, importing them, collecting their tools.

A module is imported under its dotted name relative to the project root
(`functions.function_calling.sub.tools`), with the project root on sys.path,
so that the tools' own absolute imports from the project work. The project
root is the directory above `functions/function_calling` for folders that
follow that convention, else the functions directory's parent.
"""

import dataclasses
import functools
import importlib
import importlib.machinery
import importlib.util
import inspect
import keyword
import marshal
import os
import sys
import tempfile
import types

from . import slots

CONVENTION_TAIL = ("functions", "function_calling")
SYNTHETIC_PACKAGE = "toolpool_functions"


@dataclasses.dataclass(frozen=True)
class LoadError:
    module: str
    file: str
    error: str
    failed_import: bool  # False: the module loaded, but something in it is refused

    def as_dict(self) -> dict:
        return {"module": self.module, "file": self.file, "error": self.error}


@dataclasses.dataclass
class Tool:
    name: str
    module: str   # catalog module name: path without .py, "/" between folders
    file: str     # path relative to the functions directory
    line: int
    func: object

    @functools.cached_property
    def signature(self) -> slots.Signature:
        return slots.describe(self.func)


@dataclasses.dataclass
class ToolSet:
    tools: dict   # name -> Tool, in (module, name) order
    errors: list  # LoadErrors, in module order


def _find_modules(functions_dir: str, errors: list) -> list:
    """[(module name, relative file)] for every *.py below, sorted by module name.

    Names starting with "_" (helpers, __pycache__) or "." (editor and
    notebook leftovers such as .ipynb_checkpoints) are skipped. A folder that
    cannot be read is a LoadError in `errors`: its tools would otherwise
    vanish without a word.
    """
    found = []

    def unreadable(error: OSError) -> None:
        path = error.filename or functions_dir
        relative = os.path.relpath(path, functions_dir)
        name = "." if relative == "." else relative.replace(os.sep, "/")
        errors.append(LoadError(name, name + ("" if name == "." else "/"), (
            f"{type(error).__name__}: cannot read the folder {name}: {error.strerror or error}"
        ), failed_import=True))

    for dirpath, dirnames, filenames in os.walk(functions_dir, onerror=unreadable):
        dirnames[:] = [name for name in dirnames if not _skipped(name)]
        for filename in filenames:
            if filename.endswith(".py") and not _skipped(filename):
                relative = os.path.relpath(os.path.join(dirpath, filename), functions_dir)
                found.append((relative[:-3].replace(os.sep, "/"), relative))
    return sorted(found)


def _skipped(name: str) -> bool:
    return name.startswith(("_", "."))


def _project_root(functions_dir: str) -> str:
    parts = functions_dir.rstrip(os.sep).split(os.sep)
    levels = 2 if tuple(parts[-2:]) == CONVENTION_TAIL else 1
    return os.sep.join(parts[:-levels]) or os.sep


class _FreshSourceLoader(importlib.machinery.SourceFileLoader):
    """Compiles a tool file from its source, never trusting `__pycache__`.

    A cached .pyc is trusted when the source's mtime (whole seconds) and size
    match: an edit within the same second that keeps the size (`return 1` to
    `return 2`) would bring the old code back after a reload. The compiled
    code is kept in the supervisor's code cache instead (when it gave one),
    under a hash of the file's path and source keyed by the interpreter's
    bytecode version: a worker compiles a file only when that source is new. The
    user's tool folder is left as it was (and may be read-only, as under
    --sandbox, which has no code cache).
    """

    def get_code(self, fullname):
        source = self.get_data(self.path)
        entry = _cache_entry(self.path, source)
        if entry is not None:
            try:
                with open(entry, "rb") as cached:
                    code = marshal.loads(cached.read())
                if isinstance(code, types.CodeType):
                    os.utime(entry)  # in use: the last to be pruned
                    return code
            except (OSError, ValueError, EOFError, TypeError):
                pass  # not cached yet (or cut short): compiled below
        code = self.source_to_code(source, self.path)
        if entry is not None:
            _store(entry, marshal.dumps(code))
        return code


# The supervisor's code cache directory (worker.py sets it from the boot config).
CODE_CACHE = None


def _cache_entry(path: str, source: bytes):
    if CODE_CACHE is None:
        return None
    # CPython's own hash for hash-checked .pyc files (PEP 552), keyed by the
    # bytecode version; over the path too, which the code object names.
    key = importlib.util.source_hash(os.fsencode(path) + b"\0" + source)
    return os.path.join(CODE_CACHE, key.hex() + ".code")


def _store(entry: str, blob: bytes) -> None:
    """Write an entry whole or not at all (workers start side by side)."""
    try:
        os.makedirs(os.path.dirname(entry), mode=0o700, exist_ok=True)
        fd, partial = tempfile.mkstemp(dir=os.path.dirname(entry), suffix=".partial")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(blob)
            os.replace(partial, entry)
        except BaseException:
            os.unlink(partial)
            raise
        _prune(os.path.dirname(entry))
    except OSError:
        pass  # a cache that cannot be written only costs the next start a compile


# Entries the code cache keeps; past it, the least recently used half goes
# (each edit of a tool, and each tool folder of a test run, leaves one).
CODE_CACHE_ENTRIES = 2000


def _prune(directory: str) -> None:
    """Drop the least recently used half once the cache holds too many entries."""
    with os.scandir(directory) as found:
        entries = [entry for entry in found if entry.name.endswith(".code")]
    if len(entries) <= CODE_CACHE_ENTRIES:
        return

    def last_used(entry):
        try:
            return entry.stat().st_mtime
        except OSError:
            return 0.0
    entries.sort(key=last_used)
    for entry in entries[:len(entries) // 2]:
        try:
            os.unlink(entry.path)
        except OSError:
            pass  # pruned by another worker already


_FRESH_DIRS = set()


def _compile_fresh_under(functions_dir: str) -> None:
    """Have every module file below functions_dir load through _FreshSourceLoader."""
    if functions_dir in _FRESH_DIRS:
        return
    _FRESH_DIRS.add(functions_dir)
    loaders = (
        (_FreshSourceLoader, importlib.machinery.SOURCE_SUFFIXES),
        (importlib.machinery.ExtensionFileLoader, importlib.machinery.EXTENSION_SUFFIXES),
        (importlib.machinery.SourcelessFileLoader, importlib.machinery.BYTECODE_SUFFIXES),
    )
    inside = functions_dir.rstrip(os.sep) + os.sep

    def hook(path):
        if path != functions_dir and not str(path).startswith(inside):
            raise ImportError("not a tool folder")  # the next hook's finder serves it
        return importlib.machinery.FileFinder(path, *loaders)

    sys.path_hooks.insert(0, hook)
    sys.path_importer_cache.clear()


def describe_exception(exc: BaseException) -> str:
    """`Type: message`, whatever the exception's __str__ does (raise, exit, return a non-str)."""
    try:
        name = type(exc).__name__
    except BaseException:  # noqa: B036 - a hostile metaclass
        name = "Exception"
    try:
        text = str(exc)
        if not isinstance(text, str):
            raise TypeError("__str__ returned a non-string")
    except BaseException as broken:  # noqa: B036 - __str__ may raise anything, SystemExit included
        try:
            why = type(broken).__name__
        except BaseException:  # noqa: B036
            why = "an exception"
        text = f"<its message cannot be shown: __str__ raised {why}>"
    return f"{name}: {text}"


def load_tools(functions_dir: str, before_import=None, after_import=None, skip=()) -> ToolSet:
    """Import every tool module (in sorted order) and collect its public functions.

    `before_import(module, file)` and `after_import()` run around each
    import (the worker announces it and bounds its time); modules in `skip`
    ({"module", "file", "error"} maps: they broke a worker at import) are
    reported as errors without being imported.
    """
    functions_dir = os.path.abspath(functions_dir)
    if not os.path.isdir(functions_dir):
        # A worker with no tools at all would look healthy: fail its start instead.
        raise FileNotFoundError(f"the functions directory {functions_dir} does not exist")
    root = _project_root(functions_dir)
    _compile_fresh_under(functions_dir)
    if root not in sys.path:
        sys.path.insert(1, root)  # ahead of site-packages, behind the shim's own folder
    package = os.path.relpath(functions_dir, root).split(os.sep)
    by_name = _package_importable(package[0], root)
    tools, errors = {}, []
    skipped = {entry.get("module"): entry for entry in skip if isinstance(entry, dict)}
    for module_name, relative in _find_modules(functions_dir, errors):
        if module_name in skipped:
            error = str(skipped[module_name].get("error") or "ImportHazard: it broke the worker at import")
            errors.append(LoadError(module_name, relative, error, failed_import=True))
            continue
        if before_import is not None:
            before_import(module_name, relative)
        try:
            module = _import(package + module_name.split("/"), os.path.join(functions_dir, relative), by_name)
        except BaseException as exc:  # SyntaxError, SystemExit, KeyboardInterrupt: all reported
            errors.append(LoadError(module_name, relative, describe_exception(exc), failed_import=True))
            continue
        finally:
            if after_import is not None:
                after_import()
        for name, func in _public_functions(module):
            first = tools.get(name)
            if first is not None:
                errors.append(LoadError(module_name, relative, (
                    f"DuplicateFunction: '{name}' is defined in {first.file}:{first.line} "
                    f"and in {relative}:{_first_line(func)}; the one in {first.file} is used"
                ), failed_import=False))
                continue
            tools[name] = Tool(name, module_name, relative, _first_line(func), func)
    return ToolSet(tools, errors)


def _package_importable(top: str, root: str) -> bool:
    """Whether `import top...` finds root/top, not some other package of that name."""
    if not _is_identifier(top):
        return False
    try:
        module = sys.modules.get(top)
        if module is not None:
            locations = getattr(module, "__path__", None)
        else:
            spec = importlib.util.find_spec(top)
            locations = spec.submodule_search_locations if spec else None
    except Exception:
        return False
    expected = os.path.realpath(os.path.join(root, top))
    return any(os.path.realpath(location) == expected for location in locations or ())


def _import(parts: list, path: str, by_name: bool):
    if by_name and all(_is_identifier(part) for part in parts):
        return importlib.import_module(".".join(parts))
    # A file or folder name that is not an identifier ("my-tools"): load the
    # file directly under a made-up name. Relative imports do not work there.
    name = ".".join([SYNTHETIC_PACKAGE, *parts])
    spec = importlib.util.spec_from_file_location(name, path, loader=_FreshSourceLoader(name, path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _is_identifier(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name)


def _public_functions(module) -> list:
    """(name, function) for each def/async def of this module (not imported) not starting with "_"."""
    return sorted(
        (name, value)
        for name, value in vars(module).items()
        if not name.startswith("_")
        and inspect.isfunction(value)
        and value.__module__ == module.__name__
        and value.__name__ == name  # a def under its own name, not an alias or a lambda
    )


def _first_line(func) -> int:
    try:
        func = inspect.unwrap(func)
    except ValueError:  # a __wrapped__ cycle
        pass
    return func.__code__.co_firstlineno
