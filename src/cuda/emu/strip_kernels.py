"""Extract the device code of a CUDA source for CPU emulation.

Usage: strip_kernels.py IN.cu OUT.inc

Keeps kernels, device helpers, structs and macros; drops host launchers
(anything with a <<<>>> launch, a cooperative launch, CUB device calls,
cudaFuncSetAttribute, or a todre_status / cudaError_t todre_* function) and
the CUDA includes, which src/cuda/emu/fake replaces. Used only by the test
cuda.kernels_emulated (tests/cuda.cmake)."""
import re, sys
src = open(sys.argv[1]).read()
out, i, n = [], 0, len(src)
# split into top-level items by brace depth
depth = 0; start = 0; items = []
j = 0
while j < n:
    c = src[j]
    if src.startswith('//', j):
        k = src.index('\n', j); j = k; continue
    if src.startswith('/*', j):
        k = src.index('*/', j) + 2; j = k; continue
    if c == '"':
        k = j + 1
        while src[k] != '"':
            k += 2 if src[k] == '\\' else 1
        j = k + 1; continue
    if c == "'":
        k = j + 1
        while src[k] != "'":
            k += 2 if src[k] == '\\' else 1
        j = k + 1; continue
    if c == '{': depth += 1
    elif c == '}':
        depth -= 1
        if depth == 0:
            # include trailing ';' if struct
            k = j + 1
            m = re.match(r'\s*;', src[k:])
            if m: k += m.end()
            items.append(src[start:k]); start = k; j = k; continue
    elif c == ';' and depth == 0:
        items.append(src[start:j+1]); start = j + 1
    j += 1
items.append(src[start:])
keep = []
for it in items:
    body = it
    if '<<<' in body or 'cudaLaunchCooperativeKernel' in body or 'DeviceSegmentedSort' in body \
       or 'cudaFuncSetAttribute' in body or re.search(r'\bcudaError_t\s+todre_', body) \
       or re.search(r'todre_status\s+\w+\s*\(', body) or 'static size_t qk_smem' in body \
       or 'static int qk_smem_cap' in body or 'static void qk_denominators' in body \
       or 'static unsigned blocks_for' in body:
        # keep leading preprocessor/comments only
        lines = [l for l in body.split('\n') if l.startswith('#define') or l.startswith('#undef')]
        keep.append('\n'.join(lines) + '\n')
        continue
    keep.append(body)
txt = ''.join(keep)
txt = re.sub(r'#include\s*[<"](cooperative_groups\.h|cub/[^>"]*|cuda_internal\.h|cuda_runtime\.h|cuda_fp16\.h|cuda_bf16\.h)[>"]', '', txt)
txt = re.sub(r'extern\s+__shared__\s+(\w+)\s+(\w+)\s*\[\s*\]\s*;',
             r'\1 *\2 = (\1 *)::emu::dyn_smem();', txt)
txt = re.sub(r'^using namespace todre_cuda;', '', txt, flags=re.M)
open(sys.argv[2], 'w').write(txt)
