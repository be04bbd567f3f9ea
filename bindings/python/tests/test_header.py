"""One source of truth: the package's ctypes declarations (todre/_api.py) equal
include/todre/todre.h.

The header is preprocessed with the system C compiler and parsed with
pycparser; then
  * every TODRE_API function of todre.h has an entry in _api.PROTOTYPES with
    the same result and argument types (C types mapped to ctypes), and the
    table has no other entry;
  * every enumerator of every enum of todre.h and dlpack.h equals the member
    of the matching IntEnum of _api.C_ENUMS, and every member is an
    enumerator (experimental parameters: the TODRE_EXPERIMENTAL_API macros);
  * every public struct has the same field names, order and types as its
    ctypes class in _api.C_STRUCTS, and the same offsets and size as a C
    program compiled against the header computes with offsetof / sizeof;
  * the header's macros the package restates (TODRE_MAX_RANK) are equal.

This needs only the header, a C compiler and pycparser, not the library:
_api.py is loaded from its file, without importing the package. The build's
include directory (for the generated todre/todre_version.h) comes from
$TODRE_BUILD_INCLUDE_DIR (set by tests/python/CMakeLists.txt), else <dir of
$TODRE_LIBRARY>/include, else a todre_version.h generated here from
todre_version.h.in and CMakeLists.txt's project(todre VERSION ...).
"""

import copy
import ctypes
import importlib.util
import os
import re
import shutil
import subprocess

import pytest
from pycparser import c_ast, c_parser

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("TODRE_SOURCE_DIR") or os.path.abspath(
    os.path.join(HERE, "..", "..", ".."))
INCLUDE = os.path.join(SOURCE_DIR, "include")
HEADER = os.path.join(INCLUDE, "todre", "todre.h")
DLPACK = os.path.join(INCLUDE, "todre", "dlpack.h")
API_PY = os.path.join(HERE, "..", "src", "todre", "_api.py")


def _load_api():
    spec = importlib.util.spec_from_file_location("todre_api_under_test", API_PY)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


api = _load_api()
CC = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler")  # every CI image has one


# ---------------------------------------------------------------------------
# The header, preprocessed and parsed
# ---------------------------------------------------------------------------

def _cmake_version():
    text = open(os.path.join(SOURCE_DIR, "CMakeLists.txt")).read()
    m = re.search(r"project\s*\(\s*todre\s+VERSION\s+(\d+)\.(\d+)\.(\d+)", text)
    assert m, "CMakeLists.txt has no project(todre VERSION x.y.z"
    return m.groups()


@pytest.fixture(scope="module")
def build_include(tmp_path_factory):
    candidates = [os.environ.get("TODRE_BUILD_INCLUDE_DIR")]
    if os.environ.get("TODRE_LIBRARY"):
        candidates.append(os.path.join(os.path.dirname(os.environ["TODRE_LIBRARY"]),
                                       "include"))
    for cand in candidates:
        if cand and os.path.exists(os.path.join(cand, "todre", "todre_version.h")):
            return cand
    # Header alone: configure todre_version.h the way CMake does.
    major, minor, patch = _cmake_version()
    text = open(os.path.join(INCLUDE, "todre", "todre_version.h.in")).read()
    for key, value in (("PROJECT_VERSION_MAJOR", major), ("PROJECT_VERSION_MINOR", minor),
                       ("PROJECT_VERSION_PATCH", patch),
                       ("PROJECT_VERSION", f"{major}.{minor}.{patch}")):
        text = text.replace(f"@{key}@", value)
    out = tmp_path_factory.mktemp("include")
    (out / "todre").mkdir()
    (out / "todre" / "todre_version.h").write_text(text)
    return str(out)


def _cflags(build_include):
    # Line markers are kept (no -P) so that each declaration's file is known:
    # only todre.h's functions are the API, not whatever system headers declare.
    return ["-std=c11", "-D__attribute__(x)=", "-D__extension__=", "-D__restrict=",
            "-D__inline=", "-D__asm__(x)=", "-DTODRE_EXPERIMENTAL_API",
            "-I" + INCLUDE, "-I" + build_include]


class Header:
    """What the parsed header declares."""

    def __init__(self, ast):
        self.functions = {}    # name -> FuncDecl
        self.enums = {}        # typedef name -> {enumerator: value}
        self.structs = {}      # typedef name -> [(field, type node)]
        self.handles = set()   # opaque struct typedef names
        self.files = {}        # enum / struct typedef name -> file it is defined in
        for node in ast.ext:
            src = os.path.realpath(str(node.coord.file)) if node.coord else ""
            ours = src in (os.path.realpath(HEADER), os.path.realpath(DLPACK))
            if isinstance(node, c_ast.Decl) and isinstance(node.type, c_ast.FuncDecl):
                if src == os.path.realpath(HEADER):
                    self.functions[node.name] = node.type
            elif isinstance(node, c_ast.Typedef) and ours:
                inner = node.type.type if isinstance(node.type, c_ast.TypeDecl) else None
                if isinstance(inner, c_ast.Enum) and inner.values is not None:
                    self.enums[node.name] = _enum_values(inner)
                    self.files[node.name] = src
                elif isinstance(inner, c_ast.Struct):
                    if inner.decls is None:
                        self.handles.add(node.name)
                    else:
                        self.structs[node.name] = [(d.name, d.type) for d in inner.decls]
                        self.files[node.name] = src


def _const(node):
    if isinstance(node, c_ast.Constant):
        return int(node.value.rstrip("uUlL"), 0)
    if isinstance(node, c_ast.UnaryOp) and node.op == "-":
        return -_const(node.expr)
    if isinstance(node, c_ast.Cast):
        return _const(node.expr)
    raise AssertionError(f"enumerator value not understood: {node}")


def _enum_values(enum_node):
    values, nxt = {}, 0
    for e in enum_node.values.enumerators:
        nxt = _const(e.value) if e.value is not None else nxt
        values[e.name] = nxt
        nxt += 1
    return values


@pytest.fixture(scope="module")
def header(build_include):
    pp = subprocess.run([CC, "-E", *_cflags(build_include), HEADER], capture_output=True,
                        text=True, check=True).stdout
    return Header(c_parser.CParser().parse(pp, HEADER))


@pytest.fixture(scope="module")
def macros(build_include):
    out = subprocess.run([CC, "-E", "-dM", *_cflags(build_include), HEADER],
                         capture_output=True, text=True, check=True).stdout
    defs = {}
    for line in out.splitlines():
        m = re.match(r"#define (\w+) (.*)", line)
        if m:
            defs[m.group(1)] = m.group(2).strip()
    return defs


# ---------------------------------------------------------------------------
# C types -> ctypes
# ---------------------------------------------------------------------------

_SCALARS = {
    "void": None, "char": ctypes.c_char, "int": ctypes.c_int, "signed int": ctypes.c_int,
    "unsigned": ctypes.c_uint, "unsigned int": ctypes.c_uint, "double": ctypes.c_double,
    "float": ctypes.c_float, "long": ctypes.c_long, "unsigned long": ctypes.c_ulong,
    "int8_t": ctypes.c_int8, "int16_t": ctypes.c_int16, "int32_t": ctypes.c_int32,
    "int64_t": ctypes.c_int64, "uint8_t": ctypes.c_uint8, "uint16_t": ctypes.c_uint16,
    "uint32_t": ctypes.c_uint32, "uint64_t": ctypes.c_uint64, "size_t": ctypes.c_size_t,
}
HANDLE = object()


def _base(header, names, structs):
    name = " ".join(names)
    if name in header.enums:
        return ctypes.c_int           # every enum of the header is an int
    if name in header.handles:
        return HANDLE
    if name in header.structs:
        assert name in structs, f"struct {name} has no ctypes class in _api.C_STRUCTS"
        return structs[name]
    assert name in _SCALARS, f"C type {name!r} has no ctypes mapping in the test"
    return _SCALARS[name]


def to_ctypes(header, node, structs=None):
    """The ctypes type the package must use for a C type node."""
    structs = api.C_STRUCTS if structs is None else structs
    if isinstance(node, c_ast.Typename):
        node = node.type
    if isinstance(node, c_ast.TypeDecl):
        return _base(header, node.type.names, structs)
    if isinstance(node, c_ast.ArrayDecl):
        return to_ctypes(header, node.type, structs) * _const(node.dim)
    if isinstance(node, c_ast.PtrDecl):
        inner = node.type
        if isinstance(inner, c_ast.TypeDecl):
            base = _base(header, inner.type.names, structs)
            if base is ctypes.c_char:
                return ctypes.c_char_p
            if base is None or base is HANDLE:
                return ctypes.c_void_p
            return ctypes.POINTER(base)
        return ctypes.POINTER(to_ctypes(header, inner, structs))
    raise AssertionError(f"C type not understood: {node}")


def _type_name(t):
    return "void" if t is None else getattr(t, "__name__", repr(t))


# ---------------------------------------------------------------------------
# Comparisons (each returns a list of differences; the tests want none)
# ---------------------------------------------------------------------------

def prototype_differences(header, prototypes):
    diffs = []
    for name in sorted(set(header.functions) - set(prototypes)):
        diffs.append(f"{name}: declared in todre.h, missing from _api.PROTOTYPES")
    for name in sorted(set(prototypes) - set(header.functions)):
        diffs.append(f"{name}: in _api.PROTOTYPES, not a TODRE_API function of todre.h")
    for name in sorted(set(header.functions) & set(prototypes)):
        fn = header.functions[name]
        want_res = to_ctypes(header, fn.type)
        params = fn.args.params if fn.args else []
        if len(params) == 1 and to_ctypes(header, params[0].type) is None:
            params = []   # (void)
        want_args = [to_ctypes(header, p.type) for p in params]
        got_res, got_args = prototypes[name]
        if got_res is not want_res:
            diffs.append(f"{name}: restype {_type_name(got_res)}, header says "
                         f"{_type_name(want_res)}")
        if len(got_args) != len(want_args):
            diffs.append(f"{name}: {len(got_args)} argtypes, header has {len(want_args)} "
                         "parameters")
        else:
            for i, (g, w) in enumerate(zip(got_args, want_args)):
                if g is not w:
                    diffs.append(f"{name}: argument {i} ({params[i].name}) is "
                                 f"{_type_name(g)}, header says {_type_name(w)}")
    return diffs


def _norm(name):
    return name.replace("_", "").upper()


def enum_differences(header, c_enums, macros, experimental):
    diffs = []
    for cname in sorted(set(header.enums) - set(c_enums)):
        diffs.append(f"enum {cname}: in the header, not in _api.C_ENUMS")
    for cname, (py_enum, prefix) in sorted(c_enums.items()):
        if cname not in header.enums:
            diffs.append(f"enum {cname}: in _api.C_ENUMS, not in the header")
            continue
        members = {_norm(m): m for m in py_enum.__members__}
        seen = set()
        for enumerator, value in header.enums[cname].items():
            short = enumerator[len(prefix):] if enumerator.startswith(prefix) else enumerator
            if short.startswith("ERR_") and py_enum.__name__ == "Status":
                short = short[len("ERR_"):]
            member = members.get(_norm(short))
            if member is None:
                diffs.append(f"{enumerator} = {value}: no member of {py_enum.__name__}")
                continue
            seen.add(member)
            if int(py_enum[member]) != value:
                diffs.append(f"{enumerator} = {value}, but {py_enum.__name__}.{member} = "
                             f"{int(py_enum[member])}")
        for macro, member in experimental.items():
            if isinstance(member, py_enum) and member.name not in seen:
                seen.add(member.name)
                if macro not in macros:
                    diffs.append(f"{py_enum.__name__}.{member.name}: experimental macro "
                                 f"{macro} is not in the header")
                    continue
                m = re.fullmatch(r"\(\s*\(\s*\w+\s*\)\s*(-?\d+)\s*\)|(-?\d+)", macros[macro])
                value = int(next(g for g in m.groups() if g is not None)) if m else None
                if value != int(member):
                    diffs.append(f"{macro} is {macros[macro]}, but {py_enum.__name__}."
                                 f"{member.name} = {int(member)}")
        for extra in sorted(set(py_enum.__members__) - seen):
            diffs.append(f"{py_enum.__name__}.{extra}: no enumerator of {cname}")
    return diffs


def c_layout(build_include, header, names, tmp_path):
    """{struct: ({field: offset}, size)} as the C compiler lays them out."""
    lines = ["#define TODRE_EXPERIMENTAL_API", "#include <stddef.h>", "#include <stdio.h>",
             '#include "todre/todre.h"', "int main(void) {"]
    for s in names:
        for field, _ in header.structs[s]:
            lines.append(f'    printf("%s %s %zu\\n", "{s}", "{field}", offsetof({s}, {field}));')
        lines.append(f'    printf("%s %s %zu\\n", "{s}", ".size", sizeof({s}));')
    lines += ["    return 0;", "}"]
    src = tmp_path / "layout.c"
    exe = tmp_path / "layout"
    src.write_text("\n".join(lines) + "\n")
    subprocess.run([CC, "-std=c11", "-I" + INCLUDE, "-I" + build_include, "-o", str(exe),
                    str(src)], check=True, capture_output=True, text=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    layout = {}
    for line in out.splitlines():
        s, field, value = line.split()
        offsets, size = layout.setdefault(s, ({}, 0))
        if field == ".size":
            layout[s] = (offsets, int(value))
        else:
            offsets[field] = int(value)
    return layout


def struct_differences(header, structs, layout):
    diffs = []
    for cname in sorted(n for n in header.structs
                        if header.files[n] == os.path.realpath(HEADER)):
        if cname not in structs:
            diffs.append(f"struct {cname}: in todre.h, not in _api.C_STRUCTS")
    for cname, cls in sorted(structs.items()):
        if cname not in header.structs:
            diffs.append(f"struct {cname}: in _api.C_STRUCTS, not in the header")
            continue
        c_fields = header.structs[cname]
        py_fields = [f[0] for f in cls._fields_]
        if py_fields != [f for f, _ in c_fields]:
            diffs.append(f"{cname}: fields {py_fields}, header has {[f for f, _ in c_fields]}")
            continue
        offsets, size = layout[cname]
        for (field, node), (_, py_type) in zip(c_fields, cls._fields_):
            want = to_ctypes(header, node, structs)
            if py_type is not want and not (
                    isinstance(want, type) and issubclass(want, ctypes.Array)
                    and isinstance(py_type, type) and issubclass(py_type, ctypes.Array)
                    and want._type_ is py_type._type_ and want._length_ == py_type._length_):
                diffs.append(f"{cname}.{field}: {_type_name(py_type)}, header says "
                             f"{_type_name(want)}")
            if getattr(cls, field).offset != offsets[field]:
                diffs.append(f"{cname}.{field}: ctypes offset {getattr(cls, field).offset}, "
                             f"C offset {offsets[field]}")
        if ctypes.sizeof(cls) != size:
            diffs.append(f"{cname}: ctypes size {ctypes.sizeof(cls)}, C size {size}")
    return diffs


# ---------------------------------------------------------------------------
# The tests
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def layout(build_include, header, tmp_path_factory):
    return c_layout(build_include, header, sorted(api.C_STRUCTS),
                    tmp_path_factory.mktemp("layout"))


def test_the_header_was_parsed(header):
    # Guards against a preprocessing that silently yields nothing.
    assert len(header.functions) >= 40
    assert "todre_select" in header.functions and "todre_status" in header.enums
    assert set(header.handles) >= set(api.C_HANDLES)
    raw = re.sub(r"/\*.*?\*/", "", open(HEADER).read(), flags=re.S)
    assert len(re.findall(r"^\s*TODRE_API\b", raw, flags=re.M)) == len(header.functions)


def test_prototypes_equal_the_header(header):
    assert prototype_differences(header, api.PROTOTYPES) == []


def test_enums_equal_the_header(header, macros):
    assert enum_differences(header, api.C_ENUMS, macros, api.EXPERIMENTAL_PARAMS) == []


def test_structs_equal_the_header(header, layout):
    assert set(api.C_STRUCTS) >= {"todre_param_bounds", "todre_backend_props",
                                  "todre_device_props", "DLTensor", "DLDevice", "DLDataType"}
    assert struct_differences(header, api.C_STRUCTS, layout) == []


def test_macros_equal_the_header(macros):
    assert int(macros["TODRE_MAX_RANK"]) == api.TODRE_MAX_RANK
    assert int(macros["TODRE_VERSION_MAJOR"]) == api.ABI_MAJOR
    assert api.SONAME == f"libtodre.so.{api.ABI_MAJOR}"


# The comparisons can fail: one changed declaration of each kind is reported.

def test_a_changed_prototype_is_reported(header):
    protos = dict(api.PROTOTYPES)
    res, args = protos["todre_select_keep_count"]
    protos["todre_select_keep_count"] = (res, [args[0], ctypes.c_int, args[2]])
    protos["todre_no_such_function"] = (ctypes.c_int, [])
    del protos["todre_param_name"]
    diffs = prototype_differences(header, protos)
    assert any("todre_select_keep_count: argument 1 (n)" in d for d in diffs)
    assert any("todre_no_such_function" in d for d in diffs)
    assert any("todre_param_name: declared in todre.h" in d for d in diffs)
    res, args = protos["todre_context_backend"]
    protos = {"todre_context_backend": (ctypes.c_int, args)}
    assert any("restype c_int" in d
               for d in prototype_differences(header, protos))


def test_a_changed_enum_value_is_reported(header, macros):
    import enum
    Pivot = enum.IntEnum("Pivot", {**{m.name: int(m) for m in api.Pivot}, "CENTER": 7})
    enums = dict(api.C_ENUMS)
    enums["todre_pivot"] = (Pivot, "TODRE_PIVOT_")
    diffs = enum_differences(header, enums, macros, api.EXPERIMENTAL_PARAMS)
    assert diffs == ["TODRE_PIVOT_CENTER = 2, but Pivot.CENTER = 7"]
    Extra = enum.IntEnum("Reset", {**{m.name: int(m) for m in api.Reset}, "NOTHING": 0})
    enums = {"todre_reset": (Extra, "TODRE_RESET_")}
    assert "Reset.NOTHING: no enumerator of todre_reset" in enum_differences(
        header, enums, macros, {})


def test_a_changed_struct_is_reported(header, layout):
    class Swapped(ctypes.Structure):   # read_only and type exchanged
        _fields_ = [f for f in api.ParamBounds._fields_]
        _fields_[1], _fields_[2] = _fields_[2], _fields_[1]

    class Narrow(ctypes.Structure):    # right names, wrong field type -> wrong offsets
        _fields_ = [(n, ctypes.c_int32 if n == "struct_size" else t)
                    for n, t in api.DeviceProps._fields_]

    class Wide(ctypes.Structure):      # a wider last field -> wrong size
        _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                    ("lanes", ctypes.c_uint32)]

    structs = copy.copy(api.C_STRUCTS)
    structs["todre_param_bounds"] = Swapped
    structs["todre_device_props"] = Narrow
    structs["DLDataType"] = Wide
    diffs = struct_differences(header, structs, layout)
    assert any(d.startswith("todre_param_bounds: fields") for d in diffs)
    assert "todre_device_props.name: ctypes offset 4, C offset 8" in diffs
    assert "todre_device_props.struct_size: c_int, header says c_ulong" in diffs
    assert "DLDataType.lanes: ctypes offset 4, C offset 2" in diffs
    assert "DLDataType: ctypes size 8, C size 4" in diffs
