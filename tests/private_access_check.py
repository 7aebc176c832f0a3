"""Checks that boost_cells uses MindSpore's private parts in ``boost_cells/mindspore_internals.py`` only.

Private means a name that starts with "_" and is not a dunder. Outside ``mindspore_internals.py`` a module of the
package may not:

- import a ``mindspore`` module with a private component (``mindspore._c_expression``,
  ``mindspore.communication._comm_helper``) or a private name from a ``mindspore`` module
  (``from mindspore.graph.api import _pynative_executor``), nor name such a module in a string
  (``importlib.import_module("mindspore._c_expression")``). import-linter's private-mindspore contract checks the
  Python modules too; this check also sees extension modules and private names, which its graph does not hold;
- read, write or delete a private attribute that is not the package's own: ``cell._cells``,
  ``other._backbone = ...``, also by name (``getattr``/``hasattr``/``delattr``, ``obj.__dict__``/``vars(obj)``).
  An attribute is the package's own when some module of the package other than ``mindspore_internals.py`` defines
  it: assigns it on ``self``/``cls`` (``self._level = ...``), sets it by name (``object.__setattr__(obj, "_x", ...)``,
  ``setattr``, ``super().__setattr__``, ``obj.__dict__["_x"] = ...``), or defines it in a class body or at module
  level (``def _x``, ``_x = ...``). Python's private attributes that the package may read are listed in
  ``PYTHON_PRIVATE`` (``sys._getframe``).
- use, in a class (or a mixin of a class) that subclasses a MindSpore class, a private name that one of the MindSpore
  classes of its MRO defines, through ``self``, ``cls`` or ``super()``, or define one in its body: that is
  MindSpore's state (``Model``'s ``_optimizer``, ``Cell``'s ``_cells``) even if the class assigns it, and a method of
  that name overrides a MindSpore internal.

Every problem is one line: "path:line: what".
"""
import ast
import functools
import importlib
import inspect
import re
import textwrap
import types
from dataclasses import dataclass
from pathlib import Path

EXEMPT = "boost_cells/mindspore_internals.py"
PYTHON_PRIVATE = frozenset({("sys", "_getframe")})  # (the module's name as the code writes it, the attribute)
SET_BY_NAME = frozenset({"setattr", "__setattr__"})
READ_BY_NAME = frozenset({"getattr", "hasattr", "delattr"})
DICT_METHODS = frozenset({"get", "pop", "setdefault"})
MINDSPORE_PATH = re.compile(r"mindspore(\.\w+)+")


@dataclass(frozen=True)
class Source:
    """One module of the package: its path (relative to the repository, as the problems name it), its text, and the
    imported module (for the classes' MROs), or None to skip the check of MindSpore's names."""

    path: str
    text: str
    module: types.ModuleType = None

    @functools.cached_property
    def tree(self):
        return ast.parse(self.text, self.path)


def is_private(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _string_constants(tree):
    """Module-level ``NAME = "text"`` assignments of ``tree``, to resolve a name passed for an attribute's name."""
    return {target.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
            for target in node.targets if isinstance(target, ast.Name)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}


def _text(node, constants):
    """The string ``node`` stands for (a constant, or a name of a module-level constant), or None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return constants.get(node.id) if isinstance(node, ast.Name) else None


def _is_self(node):
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def _is_super(node):
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def _is_dict_of(node):
    """Whether ``node`` is ``obj.__dict__`` or ``vars(obj)``."""
    return (isinstance(node, ast.Attribute) and node.attr == "__dict__") or (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "vars")


def _call_name(node):
    return node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)


def _body_names(body):
    """Private names a class body or a module defines: functions, classes, assignments."""
    names = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        names |= {target.id for target in targets if isinstance(target, ast.Name)}
    return {name for name in names if is_private(name)}


def _uses_by_name(tree, constants):
    """``(node, name, defines)`` for every use of a private attribute by its name in a string: ``setattr``-like calls
    (which define it), ``getattr``-like calls, ``obj.__dict__[...]``/``vars(obj)[...]`` (a definition when stored)
    and their ``get``/``pop``/``setdefault``, and ``"_x" in obj.__dict__``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name, args = _call_name(node), node.args
            method_of = node.func.value if isinstance(node.func, ast.Attribute) else None
            if name in SET_BY_NAME or name in READ_BY_NAME:
                # super().__setattr__("_x", v) names it first; setattr(obj, "_x", v), object.__setattr__(obj, ...)
                # second
                position = 0 if _is_super(method_of) else 1
                text = _text(args[position], constants) if len(args) > position else None
                if text is not None and is_private(text):
                    yield node, text, name in SET_BY_NAME
            elif name in DICT_METHODS and method_of is not None and _is_dict_of(method_of) and args:
                text = _text(args[0], constants)
                if text is not None and is_private(text):
                    yield node, text, name == "setdefault"
        elif isinstance(node, ast.Subscript) and _is_dict_of(node.value):
            text = _text(node.slice, constants)
            if text is not None and is_private(text):
                yield node, text, isinstance(node.ctx, ast.Store)
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) \
                and any(_is_dict_of(comparator) for comparator in node.comparators):
            text = _text(node.left, constants)
            if text is not None and is_private(text):
                yield node, text, False


def defined_names(tree):
    """The private attribute names the module ``tree`` defines (see the module docstring)."""
    constants = _string_constants(tree)
    names = _body_names(tree.body)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            names |= _body_names(node.body)
        elif isinstance(node, ast.Attribute) and is_private(node.attr) and _is_self(node.value) \
                and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.attr)
    names |= {name for _, name, defines in _uses_by_name(tree, constants) if defines}
    return names


def import_problems(source):
    """The imports of MindSpore's private modules and names in ``source``, and the strings naming such a module."""
    found = []
    for node in ast.walk(source.tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and MINDSPORE_PATH.fullmatch(node.value):
            names = [node.value]
        else:
            continue
        private = [name for name in names if name.split(".")[0] == "mindspore"
                   and any(is_private(part) for part in name.split(".")[1:])]
        found += [f"{source.path}:{node.lineno}: imports MindSpore's private {name}" for name in private]
    return found


def attribute_problems(source, own):
    """The uses in ``source`` of private attributes that are not in ``own`` (the package's own names)."""
    found = []
    verbs = {ast.Load: "reads", ast.Store: "writes", ast.Del: "deletes"}
    for node in ast.walk(source.tree):
        if not isinstance(node, ast.Attribute) or not is_private(node.attr) or node.attr in own:
            continue
        if isinstance(node.value, ast.Name) and (node.value.id, node.attr) in PYTHON_PRIVATE:
            continue
        found.append(f"{source.path}:{node.lineno}: {verbs[type(node.ctx)]} the private attribute '{node.attr}', "
                     "which boost_cells does not define (MindSpore's)")
    for node, name, _ in _uses_by_name(source.tree, _string_constants(source.tree)):
        if name not in own:
            found.append(f"{source.path}:{node.lineno}: uses the private attribute '{name}' by name, which boost_cells "
                         "does not define (MindSpore's)")
    return found


@functools.lru_cache(maxsize=None)
def mindspore_names(cls):
    """The private names the MindSpore class ``cls`` defines: in its body, or on ``self`` in its methods (read from
    its source)."""
    names = {name for name in vars(cls) if is_private(name)}
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):  # a class built in C or at run time
        return frozenset(names)
    return frozenset(names | defined_names(tree))


def _mindspore_state_uses(source, classdef, theirs):
    """The uses in the class ``classdef`` (of ``source``) of the MindSpore names ``theirs``: through ``self``,
    ``cls`` or ``super()``, or defined in its body."""
    found = set()
    for node in ast.walk(classdef):
        if isinstance(node, ast.Attribute) and node.attr in theirs and (_is_self(node.value) or _is_super(node.value)):
            found.add(f"{source.path}:{node.lineno}: {classdef.name} uses '{node.attr}', which a MindSpore class of "
                      "its MRO defines")
    for node in classdef.body:
        for name in _body_names([node]) & theirs:
            found.add(f"{source.path}:{node.lineno}: {classdef.name} defines '{name}', which a MindSpore class of "
                      "its MRO defines")
    return found


def mindspore_state_problems(sources):
    """The uses of MindSpore's private names in the classes of ``sources`` that subclass MindSpore classes, and in
    the package's classes in their MROs (mixins)."""
    classdefs = {(source.module.__name__, node.name): (source, node) for source in sources if source.module
                 for node in source.tree.body if isinstance(node, ast.ClassDef)}
    found = set()
    for source, classdef in classdefs.values():
        cls = getattr(source.module, classdef.name, None)
        if not isinstance(cls, type):
            continue
        theirs = set().union(*(mindspore_names(base) for base in cls.__mro__
                               if base.__module__.partition(".")[0] == "mindspore"))
        for base in cls.__mro__ if theirs else ():
            if (base.__module__, base.__qualname__) in classdefs:
                found |= _mindspore_state_uses(*classdefs[(base.__module__, base.__qualname__)], theirs)
    return sorted(found)


def problems(sources):
    """Every problem (see the module docstring) of the package's ``sources`` (``Source``); the one at ``EXEMPT`` is
    not checked and defines no name of the package's own."""
    checked = [source for source in sources if source.path != EXEMPT]
    own = set().union(*(defined_names(source.tree) for source in checked))
    found = []
    for source in checked:
        found += import_problems(source) + attribute_problems(source, own)
    return found + mindspore_state_problems(checked)


def package_sources(root):
    """A ``Source`` of every module of ``root``'s boost_cells, imported."""
    root = Path(root)
    sources = []
    for path in sorted((root / "boost_cells").rglob("*.py")):
        relative = path.relative_to(root)
        name = ".".join(relative.with_suffix("").parts).removesuffix(".__init__")
        sources.append(Source(relative.as_posix(), path.read_text(encoding="utf-8"), importlib.import_module(name)))
    return sources


def sample_source(path, text):
    """A ``Source`` of the module ``text`` (run, to have its classes) as if it were at ``path``."""
    module = types.ModuleType(Path(path).stem)
    exec(compile(text, path, "exec"), module.__dict__)  # pylint: disable=exec-used
    return Source(path, text, module)
