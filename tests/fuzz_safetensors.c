/**
 * @file tests/fuzz_safetensors.c
 * @brief libFuzzer target: stage 10's safetensors reader must never crash or
 *        read out of bounds, whatever the bytes (built with clang's
 *        -fsanitize=fuzzer,address,undefined where clang has it; see
 *        tests/CMakeLists.txt). Valid parses are also bound as a GPT-2 model.
 */
#include <stdint.h>
#include <stdlib.h>

#include "model.h"
#include "safetensors.h"

/** @brief One input: parse it, read every small float tensor, try to bind a model. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    st_file f;
    char err[256];
    if (st_parse(data, size, &f, err, sizeof err) != 0) return 0;
    for (int i = 0; i < f.n_tensors; ++i) {
        int64_t n = st_numel(&f.tensors[i]);
        if (n > 0 && n < (1 << 20)) {
            float *buf = malloc((size_t)n * sizeof(float));
            if (buf) st_read_f32(&f, &f.tensors[i], buf, err, sizeof err);
            free(buf);
        }
    }
    gpt2_model m;
    if (gpt2_model_from_safetensors(&f, 0, &m, err, sizeof err) == 0) gpt2_model_free(&m);
    st_free(&f);
    return 0;
}
