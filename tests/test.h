/* test.h -- a minimal test harness for kiln's C test programs.
 *
 *   TEST(name) { CHECK(cond); CHECK_OK(kiln_call(...)); ... }
 *   int main(void) { RUN(name); ...; return test_summary(); }
 *
 * Each failed check prints file:line and the expression (and kiln's last
 * error for CHECK_OK). The summary line "N passed, M failed" is what CI reads. */
#ifndef KILN_TEST_H
#define KILN_TEST_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"

static int test_failed_checks;
static int test_passed, test_failed;

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "  %s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            test_failed_checks++;                                              \
        }                                                                      \
    } while (0)

#define CHECK_OK(call)                                                         \
    do {                                                                       \
        kiln_status s_ = (call);                                               \
        if (s_ != KILN_OK) {                                                   \
            fprintf(stderr, "  %s:%d: %s returned %s: %s\n", __FILE__, __LINE__, #call, \
                    kiln_status_name(s_), kiln_last_error());                  \
            test_failed_checks++;                                              \
        }                                                                      \
    } while (0)

/* Expects `call` to fail with `code` and a message containing `substr`. */
#define CHECK_ERR(call, code, substr)                                          \
    do {                                                                       \
        kiln_status s_ = (call);                                               \
        if (s_ != (code) || !strstr(kiln_last_error(), (substr))) {            \
            fprintf(stderr, "  %s:%d: %s: expected %s with \"%s\", got %s: \"%s\"\n", __FILE__, \
                    __LINE__, #call, kiln_status_name(code), (substr), kiln_status_name(s_), \
                    kiln_last_error());                                        \
            test_failed_checks++;                                              \
        }                                                                      \
    } while (0)

/* KILN_TEST_ONLY=test_a,test_b: RUN runs just those (a quick look on a GPU) */
static inline bool test_selected(const char *name) {
    const char *only = getenv("KILN_TEST_ONLY");
    if (!only || !*only) return true;
    size_t n = strlen(name);
    for (const char *p = only; (p = strstr(p, name)) != NULL; p += n)
        if ((p == only || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return true;
    return false;
}

#define TEST(name) static void name(void)
#define RUN(name)                                                              \
    do {                                                                       \
        if (!test_selected(#name)) break;                                      \
        int before_ = test_failed_checks;                                      \
        name();                                                                \
        if (test_failed_checks == before_) {                                   \
            test_passed++;                                                     \
            printf("PASS %s\n", #name);                                        \
        } else {                                                               \
            test_failed++;                                                     \
            printf("FAIL %s\n", #name);                                        \
        }                                                                      \
        fflush(stdout);                                                        \
    } while (0)

static inline int test_summary(void) {
    printf("%d passed, %d failed\n", test_passed, test_failed);
    return test_failed ? 1 : 0;
}

#endif
