/* One detection of the CPU's instruction set (see cpu_isa.h).
 *
 * A feature counts only when both the CPU has it (cpuid) and the OS saves its
 * register state (xgetbv, XCR0): a CPU with AVX-512 under a kernel or
 * hypervisor that does not enable the ZMM state must not run AVX-512 code.
 * AMX needs one more step on Linux: the tile data state is off for a process
 * until it asks for it (arch_prctl ARCH_REQ_XCOMP_PERM); asked here, once,
 * and only when AMX would be used. */
#include "cpu_isa.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TODRE_ISA_X86 1
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
#endif
#endif

static pthread_once_t isa_once = PTHREAD_ONCE_INIT;
static enum todre_cpu_isa isa_supported = TODRE_CPU_ISA_GENERIC;
static enum todre_cpu_isa isa_used = TODRE_CPU_ISA_GENERIC;
static int hw_avx512bf16; /* the CPU has AVX512_BF16 (with AVX-512F usable) */
static int hw_amd;        /* cpuid's vendor is AuthenticAMD */

#ifdef TODRE_ISA_X86
#define BIT(x) (1u << (x))

static unsigned long long xcr0(void)
{
    unsigned lo, hi;
    /* xgetbv by mnemonic: no target attribute (xsave) needed */
    __asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

static int all(unsigned reg, unsigned bits) { return (reg & bits) == bits; }

/* The best level the hardware and OS support, before the AMX grant. */
static enum todre_cpu_isa detect_hw(int *amx, int *bf16)
{
    unsigned a, b, c, d, max_leaf;
    *amx = *bf16 = 0;
    if (!__get_cpuid(0, &max_leaf, &b, &c, &d) || max_leaf < 7) return TODRE_CPU_ISA_GENERIC;
    /* "Auth" "enti" "cAMD" in EBX, EDX, ECX */
    hw_amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;
    __cpuid(1, a, b, c, d);
    /* FMA 12, OSXSAVE 27, AVX 28, F16C 29 */
    if (!all(c, BIT(12) | BIT(27) | BIT(28) | BIT(29))) return TODRE_CPU_ISA_GENERIC;
    unsigned long long x = xcr0();
    if ((x & 0x6) != 0x6) return TODRE_CPU_ISA_GENERIC; /* SSE and YMM state */
    unsigned sub_max, b7, c7, d7, a71 = 0, b71, c71, d71;
    __cpuid_count(7, 0, sub_max, b7, c7, d7);
    if (sub_max >= 1) __cpuid_count(7, 1, a71, b71, c71, d71);
    if (!all(b7, BIT(5))) return TODRE_CPU_ISA_GENERIC; /* AVX2 */
    /* AVX-512F (EBX 16) with the opmask, ZMM_Hi256 and Hi16_ZMM states */
    if (!all(b7, BIT(16)) || (x & 0xe0) != 0xe0) return TODRE_CPU_ISA_AVX2;
    *bf16 = all(a71, BIT(5)); /* AVX512_BF16 (leaf 7.1 EAX 5) */
    /* AMX: AVX-512BW (EBX 30), VL (EBX 31), BF16 (leaf 7.1 EAX 5), AMX-BF16
     * (EDX 22), AMX-TILE (EDX 24), and the XTILECFG / XTILEDATA states */
    *amx = all(b7, BIT(30) | BIT(31)) && all(a71, BIT(5)) && all(d7, BIT(22) | BIT(24)) &&
           (x & 0x60000ull) == 0x60000ull;
    return TODRE_CPU_ISA_AVX512;
}

static int amx_grant(void)
{
#if defined(__linux__)
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#else
    return 0;
#endif
}
#endif /* TODRE_ISA_X86 */

/* $TODRE_CPU_ISA as a cap; no cap when unset or unknown. */
static enum todre_cpu_isa env_cap(void)
{
    const char *e = getenv("TODRE_CPU_ISA");
    if (!e) return TODRE_CPU_ISA_AMX;
    if (strcmp(e, "generic") == 0 || strcmp(e, "scalar") == 0) return TODRE_CPU_ISA_GENERIC;
    if (strcmp(e, "avx2") == 0) return TODRE_CPU_ISA_AVX2;
    if (strcmp(e, "avx512") == 0) return TODRE_CPU_ISA_AVX512;
    return TODRE_CPU_ISA_AMX;
}

static void detect(void)
{
    enum todre_cpu_isa cap = env_cap(), hw = TODRE_CPU_ISA_GENERIC;
#ifdef TODRE_ISA_X86
    int amx = 0;
    hw = detect_hw(&amx, &hw_avx512bf16);
    /* the grant changes the process (larger signal frames): only when used */
    if (amx && cap >= TODRE_CPU_ISA_AMX && amx_grant()) hw = TODRE_CPU_ISA_AMX;
    else if (amx && cap < TODRE_CPU_ISA_AMX) hw = TODRE_CPU_ISA_AMX; /* supported, not used */
#endif
    isa_supported = hw;
    isa_used = hw < cap ? hw : cap;
}

enum todre_cpu_isa todre_cpu_isa(void)
{
    pthread_once(&isa_once, detect);
    return isa_used;
}

enum todre_cpu_isa todre_cpu_isa_supported(void)
{
    pthread_once(&isa_once, detect);
    return isa_supported;
}

int todre_cpu_avx512bf16(void)
{
    pthread_once(&isa_once, detect);
    return hw_avx512bf16 && isa_used >= TODRE_CPU_ISA_AVX512;
}

int todre_cpu_amd(void)
{
    pthread_once(&isa_once, detect);
    return hw_amd;
}

const char *todre_cpu_isa_name(enum todre_cpu_isa isa)
{
    switch (isa) {
    case TODRE_CPU_ISA_AMX: return "amx";
    case TODRE_CPU_ISA_AVX512: return "avx512";
    case TODRE_CPU_ISA_AVX2: return "avx2";
    case TODRE_CPU_ISA_GENERIC: break;
    }
    return "generic";
}
