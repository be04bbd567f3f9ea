"""Turn a CUDA source of libtodre-cuda into C++ for the CPU emulator.

Usage: emulate_cu.py IN.cu OUT.cpp

The one translation of src/cuda/*.cu for the emulator: whole files, host
code included, compiled once (tests/cuda_emu/CMakeLists.txt, object library
todre_cuda_emu_objs) and linked both into the emulated module and into the
kernels test, so that the module's own orchestration and its kernels run
against the emulated runtime (tests/cuda_emu/fake). Three rewrites, each to
something the emulator defines; nothing else changes:
  K<<<grid, block[, smem[, stream]]>>>(args)  ->  emu::launch_kernel(K, emu::cfg(...), args)
  cudaLaunchCooperativeKernel((const void *)K, ...)  ->  ...(K, ...)  (typed)
  extern __shared__ T name[];  ->  T *name = (T *)emu::dyn_smem();"""
import re
import sys


def matching(src, i, open_ch, close_ch):
    """Index just past the bracket that closes src[i] (== open_ch)."""
    depth = 0
    while i < len(src):
        c = src[i]
        if c == open_ch:
            depth += 1
        elif c == close_ch:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise SystemExit("unbalanced %s" % open_ch)


def kernel_start(src, end):
    """Start of the kernel expression ending at end (name, template args)."""
    i = end
    while i > 0 and src[i - 1].isspace():
        i -= 1
    if src[i - 1] == '>':  # template arguments
        depth = 0
        while True:
            i -= 1
            if src[i] == '>':
                depth += 1
            elif src[i] == '<':
                depth -= 1
                if depth == 0:
                    break
    while i > 0 and (src[i - 1].isalnum() or src[i - 1] in '_:'):
        i -= 1
    return i


def rewrite_launches(src):
    out = []
    pos = 0
    while True:
        j = src.find('<<<', pos)
        if j < 0:
            out.append(src[pos:])
            return ''.join(out)
        k0 = kernel_start(src, j)
        kernel = src[k0:j].strip()
        c1 = src.index('>>>', j)
        cfg = src[j + 3:c1]
        p0 = src.index('(', c1)
        p1 = matching(src, p0, '(', ')')
        args = src[p0 + 1:p1 - 1].strip()
        out.append(src[pos:k0])
        out.append('::emu::launch_kernel(%s, ::emu::cfg(%s)%s)'
                   % (kernel, cfg, (', ' + args) if args else ''))
        pos = p1


def main():
    src = open(sys.argv[1]).read()
    src = rewrite_launches(src)
    src = re.sub(r'cudaLaunchCooperativeKernel\(\s*\(const void \*\)\s*', 'cudaLaunchCooperativeKernel(', src)
    src = re.sub(r'extern\s+__shared__\s+(\w+)\s+(\w+)\s*\[\s*\]\s*;',
                 r'\1 *\2 = (\1 *)::emu::dyn_smem();', src)
    if '<<<' in src or '__shared__ float' in src and 'extern __shared__' in src:
        raise SystemExit('emulate_cu.py: a construct was not rewritten in ' + sys.argv[1])
    with open(sys.argv[2], 'w') as f:
        f.write('// Generated from %s by tests/cuda_emu/emulate_cu.py: do not edit.\n' % sys.argv[1])
        f.write('#line 1 "%s"\n' % sys.argv[1])
        f.write(src)


main()
