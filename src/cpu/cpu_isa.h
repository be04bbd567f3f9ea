/* The instruction set the CPU backend runs, chosen one way, once per
 * process (cpu_isa.c): what the CPU and the OS support (cpuid, xgetbv, and
 * on Linux the kernel's grant of the AMX tile state), capped by the
 * environment variable TODRE_CPU_ISA. Every kernel table of the backend
 * (select_kernels.c, relevance_util.c, relevance_qk.c, select_amx.c) and its
 * capabilities (cpu_backend.c) read this one answer.
 *
 * Kernels for a level above the baseline carry per-function
 * __attribute__((target("..."))) (accepted by gcc >= 12 and clang >= 14);
 * the library itself is built for the baseline ISA. */
#ifndef TODRE_SRC_CPU_ISA_H
#define TODRE_SRC_CPU_ISA_H

/* Levels, each including the one below. */
enum todre_cpu_isa {
    /* Portable C (also every non-x86-64 build). */
    TODRE_CPU_ISA_GENERIC = 0,
    /* AVX2 + FMA + F16C, with the AVX state enabled by the OS. */
    TODRE_CPU_ISA_AVX2 = 1,
    /* + AVX-512F, with the opmask / ZMM states enabled by the OS. */
    TODRE_CPU_ISA_AVX512 = 2,
    /* + AVX-512BW/VL/BF16, AMX-TILE and AMX-BF16, tile state enabled by the
     * OS and granted to the process (Linux arch_prctl). */
    TODRE_CPU_ISA_AMX = 3
};

/* The level in use: min(what this machine supports, $TODRE_CPU_ISA).
 * TODRE_CPU_ISA is read once, at the first call: "generic" (or "scalar"),
 * "avx2", "avx512" or "amx" caps the level; unset, empty or any other value
 * means the best supported one. Thread-safe (pthread_once). */
enum todre_cpu_isa todre_cpu_isa(void);

/* The level this machine supports, ignoring TODRE_CPU_ISA. */
enum todre_cpu_isa todre_cpu_isa_supported(void);

/* Whether the level in use is AVX-512 or above and the CPU has AVX512_BF16
 * (VDPBF16PS: two bf16 products a lane summed into fp32; Zen 4 and later,
 * Cooper Lake, Sapphire Rapids and later). */
int todre_cpu_avx512bf16(void);

/* Whether the CPU is AMD's ("AuthenticAMD"). Their VDPBF16PS issues at an
 * FMA's rate (Zen 4, measured), Intel's at a quarter of it (Emerald Rapids,
 * measured): the bf16 ROWS kernel takes it by default on AMD only
 * (select_rows.c). */
int todre_cpu_amd(void);

/* "amx", "avx512", "avx2" or "generic" (todre_device_props.arch). */
const char *todre_cpu_isa_name(enum todre_cpu_isa isa);

#endif /* TODRE_SRC_CPU_ISA_H */
