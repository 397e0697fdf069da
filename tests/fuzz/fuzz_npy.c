/* fuzz_npy.c -- libFuzzer target for the .npy reader (tools/npy.h).
 *
 * The input bytes are parsed with npy_parse; a parsed array's data is read
 * in full (so a wrong nbytes is caught by ASan) and freed.
 * See tests/fuzz/README.md. */
#include <stddef.h>
#include <stdint.h>

#include "npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    npy_array a;
    char err[256];
    if (npy_parse(data, size, &a, err, sizeof err) != 0) return 0;
    volatile unsigned sum = 0;
    const unsigned char *p = a.data;
    for (size_t i = 0; i < a.nbytes; i++) sum += p[i];
    (void)sum;
    npy_free(&a);
    return 0;
}
