"""Every public name of the Python package is documented, twice.

Once where an editor shows it (a docstring at runtime, or in the stub
``headway/_native.pyi`` for the native classes, which is what type checkers
and IDEs read), and once in ``docs/api.md``, the reference a user reads
before choosing between Python and Node. The names come from the running
package (``__all__`` of ``headway`` and its public submodules, and every
public member of every public class), so a name added later fails here until
it is documented. Private names (a leading underscore) are not checked.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import types
from pathlib import Path

import pytest

import headway
import headway.admin
import headway.schedule
import headway.testing

ROOT = Path(__file__).resolve().parent.parent
API_MD = ROOT / "docs" / "api.md"
STUB = ROOT / "bindings-python" / "headway" / "_native.pyi"

# The modules a user imports, with the prefix api.md files them under.
MODULES = [headway, headway.admin, headway.schedule, headway.testing]


def _stub_docs() -> dict[str, str]:
    """``"Class"`` / ``"Class.member"`` / ``"function"`` -> the stub's docstring."""
    tree = ast.parse(STUB.read_text(encoding="utf-8"))
    docs: dict[str, str] = {}

    def doc_of(node: ast.AST) -> str | None:
        return ast.get_docstring(node) if isinstance(
            node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        ) else None

    body = tree.body
    for i, node in enumerate(body):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            if d := doc_of(node):
                docs[node.name] = d
        if isinstance(node, ast.ClassDef):
            for j, member in enumerate(node.body):
                if isinstance(member, ast.FunctionDef) and (d := doc_of(member)):
                    docs[f"{node.name}.{member.name}"] = d
                # A class-level ``NAME: T`` followed by a string is documented.
                if isinstance(member, ast.AnnAssign) and isinstance(member.target, ast.Name):
                    nxt = node.body[j + 1] if j + 1 < len(node.body) else None
                    if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
                        docs[f"{node.name}.{member.target.id}"] = str(nxt.value.value)
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            nxt = body[i + 1] if i + 1 < len(body) else None
            if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
                docs[node.target.id] = str(nxt.value.value)
    return docs


STUB_DOCS = _stub_docs()
API_TEXT = API_MD.read_text(encoding="utf-8") if API_MD.exists() else ""
# Everything api.md shows as code: inline spans and fenced blocks.
CODE = " ".join(
    re.findall(r"`([^`\n]+)`", API_TEXT) + re.findall(r"```[a-z]*\n(.*?)```", API_TEXT, re.S)
)


def _public_names() -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    for mod in MODULES:
        prefix = "" if mod is headway else mod.__name__.removeprefix("headway.") + "."
        for name in mod.__all__:
            assert not name.startswith("_"), f"{mod.__name__}.__all__ lists private {name}"
            out.append((prefix + name, getattr(mod, name)))
    return out


PUBLIC = _public_names()


def _is_alias(obj: object) -> bool:
    # ``Taken`` is a typing alias: documented by the ``#:`` comment and api.md.
    if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)):
        return False
    return type(obj).__module__ in ("typing", "types") or not callable(obj)


def _own_doc(obj: object) -> str | None:
    """The docstring ``obj`` itself carries, not one inherited from a builtin."""
    doc = getattr(obj, "__doc__", None)
    if isinstance(obj, type):
        doc = obj.__dict__.get("__doc__")
    if not isinstance(doc, str) or not doc.strip():
        return None
    return doc


def _members(cls: type) -> list[tuple[str, object]]:
    """Public members defined by ``cls`` or a headway base of it."""
    seen: dict[str, object] = {}
    for klass in cls.__mro__:
        if not (klass.__module__ or "").startswith("headway"):
            continue
        for name, value in vars(klass).items():
            if name.startswith("_") or name in seen:
                continue
            seen[name] = value
    return sorted(seen.items())


def _member_doc(cls: type, name: str, value: object) -> str | None:
    if doc := STUB_DOCS.get(f"{cls.__name__}.{name}"):
        return doc
    raw = value
    if isinstance(raw, types.MemberDescriptorType):
        # A slot: ``__slots__ = {"name": "its docstring"}`` (what ``help()``
        # shows; Python 3.11's descriptors do not carry it themselves).
        for klass in cls.__mro__:
            slots = klass.__dict__.get("__slots__")
            if isinstance(slots, dict) and (doc := slots.get(name)):
                return str(doc)
    if isinstance(raw, (staticmethod, classmethod)):
        raw = raw.__func__
    if isinstance(raw, (property, types.FunctionType, types.MethodDescriptorType,
                        types.GetSetDescriptorType, types.MemberDescriptorType,
                        types.BuiltinFunctionType, types.BuiltinMethodType,
                        types.ClassMethodDescriptorType)) or callable(raw):
        doc = getattr(raw, "__doc__", None)
        return doc if doc and doc.strip() else None
    # A constant (``Jitter.FULL``): its class's docstring must name it.
    class_doc = STUB_DOCS.get(cls.__name__) or _own_doc(cls) or ""
    return class_doc if re.search(rf"\b{re.escape(name)}\b", class_doc) else None


def _mentioned(name: str) -> bool:
    return re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", CODE) is not None


def test_api_md_exists() -> None:
    assert API_MD.exists(), "docs/api.md is the API reference"


@pytest.mark.parametrize("qualname,obj", PUBLIC, ids=[n for n, _ in PUBLIC])
def test_public_name_documented(qualname: str, obj: object) -> None:
    short = qualname.rsplit(".", 1)[-1]
    if not _is_alias(obj):
        doc = STUB_DOCS.get(short) or _own_doc(obj)
        assert doc, f"{qualname} has no docstring (runtime or _native.pyi)"
    assert _mentioned(short), f"{qualname} is not mentioned in docs/api.md"


CLASSES = [(n, o) for n, o in PUBLIC if isinstance(o, type)]
MEMBERS = [
    (f"{qualname}.{member}", cls, member, value)
    for qualname, cls in CLASSES
    for member, value in _members(cls)
]


@pytest.mark.parametrize(
    "qualname,cls,member,value", MEMBERS, ids=[m[0] for m in MEMBERS]
)
def test_public_member_documented(qualname: str, cls: type, member: str, value: object) -> None:
    assert _member_doc(cls, member, value), f"{qualname} has no docstring (runtime or _native.pyi)"
    assert _mentioned(member), f"{qualname} is not mentioned in docs/api.md"


def test_stub_classes_and_functions_have_docstrings() -> None:
    """Every public class and function the stub declares has a docstring,
    and so does every public method or property of a public class."""
    tree = ast.parse(STUB.read_text(encoding="utf-8"))
    missing = []
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and not node.name.startswith("_"):
            if not ast.get_docstring(node):
                missing.append(node.name)
            if isinstance(node, ast.ClassDef):
                for m in node.body:
                    if isinstance(m, ast.FunctionDef) and not m.name.startswith("_"):
                        if not ast.get_docstring(m):
                            missing.append(f"{node.name}.{m.name}")
    assert not missing, f"no docstring in _native.pyi: {missing}"


def test_cli_commands_documented() -> None:
    """Every ``headway`` subcommand (the core parser's usage for Python) is
    in docs/api.md."""
    from headway import _native

    text = json.loads(_native.cli_parse(["--help"]))["text"]
    commands = set(re.findall(r"headway (\w+)", text))
    assert {"worker", "beat", "admin", "inspect", "control", "demo"} <= commands, text
    for command in sorted(commands):
        assert re.search(rf"headway {command}\b", API_TEXT), f"`headway {command}` not in docs/api.md"


def test_rust_examples_are_the_crate_doc_tests() -> None:
    """Each Rust example of docs/api.md is a doc test of ``core/src/lib.rs``,
    so ``cargo test --doc`` keeps it compiling and true."""
    lib = (ROOT / "core" / "src" / "lib.rs").read_text(encoding="utf-8")
    docs = "\n".join(
        line.removeprefix("//!").removeprefix(" ")
        for line in lib.splitlines()
        if line.startswith("//!")
    )
    examples = re.findall(r"```rust\n(.*?)```", API_TEXT, re.S)
    assert examples, "docs/api.md shows no Rust example"
    for example in examples:
        assert example in docs, f"not a doc test of core/src/lib.rs:\n{example}"
