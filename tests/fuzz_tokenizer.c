/**
 * @file fuzz_tokenizer.c
 * @brief libFuzzer target for the tokenizer's loaders (untrusted input): the
 *        input is vocab.json's bytes, a NUL byte, then merges.txt's bytes. A
 *        loaded tokenizer must encode and decode text back to itself.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    if (!nul) return 0;
    size_t vocab_len = (size_t)(nul - data);
    char err[512];
    gpt2_tokenizer *t = tok_load_memory((const char *)data, vocab_len, (const char *)nul + 1, size - vocab_len - 1, err,
                                        sizeof err);
    if (!t) return 0;
    /* byte-level BPE: any bytes encode, and decode back to the same bytes */
    const char *text = (const char *)data;
    size_t len = vocab_len < 256 ? vocab_len : 256;
    int ids[256];
    int n = tok_encode(t, text, len, ids, 256);
    char back[256];
    if (n < 0 || n > (int)len || tok_decode(t, ids, n, back, sizeof back) != (long)len || memcmp(back, text, len) != 0)
        abort();
    tok_free(t);
    return 0;
}
