"""`python -m todre info` (console script `todre-info`): what a user or a bug
report needs first. The package and library versions, where each was loaded
from, how the wheel was built, the OpenBLAS in use, every backend (available
or why not; a module file next to the library that could not be registered,
with the loader's reason) and every device with its code path (CPU
instruction set, CUDA architecture). `--json` prints the same as one object.
"""

import argparse
import ctypes
import json
import os
import sys


# Environment variables that change the CPU backend's paths (read once by
# the library): the instruction-set cap, the bf16 product kernel, who makes
# Gram matrices, and the processors a context may use.
_CPU_OVERRIDES = ("TODRE_CPU_ISA", "TODRE_CPU_BF16", "TODRE_CPU_GRAM", "TODRE_CPU_PROCS")


def _openblas():
    """(path, config, corename, threads) of the OpenBLAS mapped into this
    process (libtodre's: NumPy's own copy is named libscipy_openblas*), or
    None. Read from the library itself: openblas_get_config() and friends."""
    from ._lib import mapped_files
    paths = [p for p in mapped_files() if os.path.basename(p).startswith("libopenblas")]
    if not paths:
        return None
    path = paths[0]
    info = {"path": path}
    try:
        blas = ctypes.CDLL(path)  # already loaded: the same handle
        for key, fn, restype in (("config", "openblas_get_config", ctypes.c_char_p),
                                 ("core", "openblas_get_corename", ctypes.c_char_p),
                                 ("threads", "openblas_get_num_threads", ctypes.c_int)):
            f = getattr(blas, fn, None)
            if f is not None:
                f.restype, f.argtypes = restype, []
                value = f()
                info[key] = value.decode(errors="replace").strip() if isinstance(value, bytes) \
                    else value
    except OSError:
        pass
    return info


# OpenBLAS cores by kernel class (1 SSE, 2 AVX, 3 AVX2, 4 AVX-512), as
# src/cpu/blas_class.h ranks them, and the class each CPU level expects.
_BLAS_CLASS = {**{c: 4 for c in ("skylakex", "cooperlake", "sapphirerapids")},
               **{c: 3 for c in ("haswell", "zen", "excavator")},
               **{c: 2 for c in ("sandybridge", "bulldozer", "piledriver", "steamroller")},
               **{c: 1 for c in ("prescott", "core2", "penryn", "dunnington", "nehalem", "atom",
                                 "barcelona", "opteron", "opteron_sse3", "bobcat", "nano",
                                 "katmai", "coppermine", "northwood", "banias", "athlon")}}
_LEVEL_CLASS = {"avx2": 3, "avx512": 4, "amx": 4}


def blas_note(core, arch):
    """A line for an OpenBLAS whose kernels are of a lesser class than the
    CPU level libtodre uses (an OpenBLAS older than the CPU: Debian 12's runs
    'Prescott' on Emerald Rapids), else None."""
    have = _BLAS_CLASS.get((core or "").lower())
    want = _LEVEL_CLASS.get(arch or "")
    if not have or not want or have >= want:
        return None
    fix = "SkylakeX" if want == 4 else "Haswell"
    return (f"OpenBLAS runs its {core} kernels on this {arch} CPU: libtodre makes Gram "
            f"matrices on its own kernels instead; OPENBLAS_CORETYPE={fix} speeds up what "
            f"still uses BLAS (docs/building.md)")


def collect():
    """Everything `info` prints, as a dict (the --json output)."""
    import todre
    from . import _lib

    out = {
        "package": {"version": todre.__version__,
                    "path": os.path.dirname(os.path.abspath(todre.__file__))},
        "library": {"version": todre.version(), "version_number": int(
            todre._cdll.todre_version_number()), "path": todre.library_path,
            "source": _source(todre.library_path)},
        "build": None,
        "openblas": _openblas(),
        "cublas_preloaded": list(_lib.cublas_preloaded),
        "cpu_isa_override": os.environ.get("TODRE_CPU_ISA", ""),
        # every CPU-path override the library reads (docs/building.md, docs/api.md)
        "cpu_overrides": {k: os.environ[k] for k in _CPU_OVERRIDES if k in os.environ},
        "backends": [],
    }
    blas = out["openblas"]
    if blas is not None:
        cpus = [d for b in todre.backends() if b.name == "cpu" and b.available
                for d in todre.devices("cpu")]
        blas["note"] = blas_note(blas.get("core"), cpus[0].arch if cpus else None)
    config = _lib.build_config()
    if config is not None:
        out["build"] = {"cuda_major": config.cuda_major,
                        "cuda_architectures": config.cuda_architectures,
                        "blas": config.blas, "compiler": config.compiler}
    registered = set()
    for b in todre.backends():
        registered.add(b.name)
        entry = {"name": b.name, "registered": True, "available": b.available,
                 "reason": b.reason, "path": b.path, "device_type": int(b.device_type),
                 "devices": []}
        if b.available:
            for d in todre.devices(b.name):
                entry["devices"].append({"index": d.index, "name": d.name, "arch": d.arch,
                                         "total_memory": d.total_memory,
                                         "compute_capability": list(d.compute_capability),
                                         "cores": d.cores})
        out["backends"].append(entry)
    # Module files next to the library that the registry did not take (a CUDA
    # module whose cuBLAS is missing, ...): the library says why.
    libdir = os.path.dirname(os.path.abspath(todre.library_path))
    for sub in (libdir, os.path.join(libdir, "todre")):
        try:
            names = sorted(os.listdir(sub))
        except OSError:
            continue
        for f in names:
            if f.startswith("libtodre-") and f.endswith(".so"):
                name = f[len("libtodre-"):-len(".so")]
                if name not in registered:
                    registered.add(name)
                    out["backends"].append({
                        "name": name, "registered": False, "available": False,
                        "reason": todre.backend_available(name)[1],
                        "path": os.path.join(sub, f), "device_type": None, "devices": []})
    return out


def _source(path):
    here = os.path.dirname(os.path.abspath(__file__))
    if os.environ.get("TODRE_LIBRARY"):
        return "TODRE_LIBRARY"
    if os.path.dirname(os.path.abspath(path)) == here:
        return "bundled with the package"
    return "system"


def _gib(n):
    return f"{n / (1 << 30):.1f} GiB"


def print_text(info, file=sys.stdout):
    p = lambda *a: print(*a, file=file)  # noqa: E731
    pkg, lib = info["package"], info["library"]
    p(f"todre {pkg['version']} (package {pkg['path']})")
    p(f"libtodre {lib['version']} from {lib['path']} ({lib['source']})")
    b = info["build"]
    if b is not None:
        cuda = (f"CUDA module for CUDA {b['cuda_major']} ({b['cuda_architectures']})"
                if b["cuda_major"] else "no CUDA module")
        p(f"built with {b['compiler']}, {b['blas']}, {cuda}")
    blas = info["openblas"]
    if blas is None:
        p("OpenBLAS: not loaded")
    else:
        extra = "; ".join(x for x in (blas.get("config"),
                                      f"core {blas['core']}" if blas.get("core") else "",
                                      f"{blas['threads']} threads" if "threads" in blas
                                      else "") if x)
        p(f"OpenBLAS: {blas['path']}" + (f" ({extra})" if extra else ""))
        if blas.get("note"):
            p("  " + blas["note"])
    if info["cublas_preloaded"]:
        p("cuBLAS: " + ", ".join(info["cublas_preloaded"]) + " (NVIDIA runtime wheels)")
    for k, v in info["cpu_overrides"].items():
        p(f"{k}={v}")
    for be in info["backends"]:
        where = f"module {be['path']}" if be["path"] else "built in"
        if not be["registered"]:
            p(f"backend {be['name']}: not loaded ({be['reason']}); {where}")
        elif be["available"]:
            n = len(be["devices"])
            p(f"backend {be['name']}: available, {n} device{'' if n == 1 else 's'}; {where}")
        else:
            p(f"backend {be['name']}: unavailable ({be['reason']}); {where}")
        for d in be["devices"]:
            cc = d["compute_capability"]
            kind = "instruction set" if be["name"] == "cpu" else "arch"
            line = f"  device {d['index']}: {d['name']}; {kind} {d['arch']}; " \
                   f"{_gib(d['total_memory'])} memory; "
            if cc[0] > 0:
                line += f"compute capability {cc[0]}.{cc[1]}; {d['cores']} multiprocessors"
            else:
                line += f"{d['cores']} cores"
            p(line)


def _info(args):
    data = collect()
    if args.json:
        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_text(data)
    return 0


def _info_options(parser):
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def main(argv=None):
    """`python -m todre info [--json]`."""
    parser = argparse.ArgumentParser(
        prog="python -m todre", description="todre: ToDRE visual token pruning over libtodre")
    sub = parser.add_subparsers(dest="command")
    _info_options(sub.add_parser(
        "info", help="versions, library path, OpenBLAS, backends, devices, CPU instruction set"))
    args = parser.parse_args(argv)
    if args.command != "info":
        parser.print_help(sys.stderr)
        return 2
    return _info(args)


def info_main(argv=None):
    """The console script `todre-info [--json]`."""
    parser = argparse.ArgumentParser(prog="todre-info", description="same as python -m todre info")
    _info_options(parser)
    return _info(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
