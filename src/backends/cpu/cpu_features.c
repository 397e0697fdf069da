/* cpu_features.c -- what this CPU can do: its architecture and features
 * (the target string engines are built for and checked against), and the
 * facts the CPU kernels choose by (AVX512-BF16, oneDNN built in). */
#include "backends/cpu/cpu_features.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <stdio.h>
#include <stdlib.h>

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

bool kiln__cpu_has_bf16(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    /* CPUID leaf 7 subleaf 1, EAX bit 5: AVX512_BF16. */
    unsigned a = 0, b = 0, c = 0, d = 0;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(1));
    __builtin_cpu_init();
    return (a & (1u << 5)) != 0 && __builtin_cpu_supports("avx512f");
#else
    return false;
#endif
}

bool kiln__have_dnnl(void) { return KILN_HAVE_DNNL != 0; }

/* ---- features ------------------------------------------------------ */

#if defined(__x86_64__)
#define KILN_CPU_ARCH "x86_64"
#elif defined(__i386__)
#define KILN_CPU_ARCH "x86"
#elif defined(__aarch64__)
#define KILN_CPU_ARCH "aarch64"
#elif defined(__arm__)
#define KILN_CPU_ARCH "arm"
#elif defined(__riscv) && __riscv_xlen == 64
#define KILN_CPU_ARCH "riscv64"
#elif defined(__powerpc64__)
#define KILN_CPU_ARCH "ppc64"
#else
#define KILN_CPU_ARCH "unknown"
#endif

const char *kiln__cpu_arch(void) { return KILN_CPU_ARCH; }

/* Feature names kiln knows, per architecture (as written in target strings). */
static const char *const kiln_cpu_features[] = {
#if defined(__x86_64__) || defined(__i386__)
    "sse4.2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512vnni",
    "avx512_bf16",
#elif defined(__aarch64__)
    "asimd", "fp16", "dotprod", "sve",
#endif
    NULL,
};

/* KILN_HIDE_CPU_FEATURES (names separated by spaces or commas): kiln acts as
 * if this CPU lacked them when it checks an engine's required features and
 * writes a target string, so that what another machine would say can be
 * tried here (tests, and users checking an engine before shipping it). */
static bool cpu_feature_hidden(const char *name) {
    const char *h = getenv("KILN_HIDE_CPU_FEATURES");
    size_t n = strlen(name);
    while (h && *h) {
        h += strspn(h, " ,");
        size_t len = strcspn(h, " ,");
        if (len == n && !memcmp(h, name, n)) return true;
        h += len;
    }
    return false;
}

bool kiln__cpu_has_feature(const char *name, bool *known) {
    *known = true;
    for (int i = 0; kiln_cpu_features[i]; i++)
        if (!strcmp(kiln_cpu_features[i], name) && cpu_feature_hidden(name)) return false;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (!strcmp(name, "sse4.2")) return __builtin_cpu_supports("sse4.2");
    if (!strcmp(name, "avx")) return __builtin_cpu_supports("avx");
    if (!strcmp(name, "avx2")) return __builtin_cpu_supports("avx2");
    if (!strcmp(name, "fma")) return __builtin_cpu_supports("fma");
    if (!strcmp(name, "f16c")) { /* clang 14 has no "f16c" for __builtin_cpu_supports */
        unsigned a, b, c, d;
        return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
    }
    if (!strcmp(name, "avx512f")) return __builtin_cpu_supports("avx512f");
    if (!strcmp(name, "avx512bw")) return __builtin_cpu_supports("avx512bw");
    if (!strcmp(name, "avx512vl")) return __builtin_cpu_supports("avx512vl");
    if (!strcmp(name, "avx512vnni")) return __builtin_cpu_supports("avx512vnni");
    if (!strcmp(name, "avx512_bf16")) return kiln__cpu_has_bf16();
#elif defined(__aarch64__) && defined(__linux__)
    unsigned long hw = getauxval(AT_HWCAP);
    if (!strcmp(name, "asimd")) return (hw & (1ul << 1)) != 0;    /* HWCAP_ASIMD */
    if (!strcmp(name, "fp16")) return (hw & (1ul << 10)) != 0;    /* HWCAP_ASIMDHP */
    if (!strcmp(name, "dotprod")) return (hw & (1ul << 20)) != 0; /* HWCAP_ASIMDDP */
    if (!strcmp(name, "sve")) return (hw & (1ul << 22)) != 0;     /* HWCAP_SVE */
#endif
    *known = false;
    return false;
}

void kiln__cpu_target(char *buf, size_t n) {
    if (!buf || n == 0) return;
    size_t len = (size_t)snprintf(buf, n, "cpu %s", KILN_CPU_ARCH);
    for (int i = 0; kiln_cpu_features[i] && len < n; i++) {
        bool known;
        if (!kiln__cpu_has_feature(kiln_cpu_features[i], &known)) continue;
        size_t add = strlen(kiln_cpu_features[i]) + 1;
        if (len + add >= n) break; /* never cut a name in half */
        len += (size_t)snprintf(buf + len, n - len, " %s", kiln_cpu_features[i]);
    }
}
